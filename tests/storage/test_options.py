"""``storage_options`` as boto3, object_store and fsspec users write them (:mod:`litstore.storage.options`).

These need no server: the mapping is checked on its output, and refusals happen
before any request. ``tests/storage/test_s3.py`` uses each spelling against moto.
"""

from __future__ import annotations

import pytest
from botocore import UNSIGNED
from botocore.config import Config

import litstore
from litstore.errors import InvalidArgumentError
from litstore.storage.options import S3_KEYS, s3_client_options

EXPECTED = {
    "endpoint_url": "http://127.0.0.1:9000",
    "region_name": "eu-west-1",
    "aws_access_key_id": "AKID",
    "aws_secret_access_key": "SECRET",
    "aws_session_token": "TOKEN",
}


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(EXPECTED, id="boto3"),
        pytest.param(
            {
                "aws_endpoint": "http://127.0.0.1:9000",
                "allow_http": "true",
                "aws_region": "eu-west-1",
                "aws_access_key_id": "AKID",
                "aws_secret_access_key": "SECRET",
                "aws_session_token": "TOKEN",
            },
            id="object_store",
        ),
        pytest.param(
            {
                "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
                "AWS_ALLOW_HTTP": True,
                "REGION": "eu-west-1",
                "ACCESS_KEY_ID": "AKID",
                "SECRET_ACCESS_KEY": "SECRET",
                "TOKEN": "TOKEN",
            },
            id="object_store upper case",
        ),
        pytest.param(
            {
                "key": "AKID",
                "secret": "SECRET",
                "token": "TOKEN",
                "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
            },
            id="fsspec",
        ),
    ],
)
def test_every_spelling_maps_to_the_same_boto3_arguments(options: dict[str, object]) -> None:
    assert s3_client_options(options, environ={}) == EXPECTED


def test_mapping_its_own_output_changes_nothing() -> None:
    """What a store hands on (to litdata, Ray tasks, DataLoader workers) opens the same store again."""
    mapped = s3_client_options({"aws_endpoint": "http://h:1", "timeout": "30s", "anon": True}, environ={})
    assert s3_client_options(mapped, environ={}) == mapped


def test_client_options_become_a_botocore_config() -> None:
    mapped = s3_client_options(
        {"timeout": "1.5s", "connect_timeout": "500ms", "virtual_hosted_style_request": False, "skip_signature": True},
        environ={},
    )
    config = mapped.pop("config")
    assert mapped == {}
    assert isinstance(config, Config)
    assert (config.read_timeout, config.connect_timeout) == (1.5, 0.5)
    assert config.s3 == {"addressing_style": "path"}
    assert config.signature_version is UNSIGNED
    merged = s3_client_options({"config": Config(retries={"max_attempts": 2}), "read_timeout": 3}, environ={})
    assert merged["config"].retries == {"max_attempts": 2}
    assert merged["config"].read_timeout == 3.0
    assert s3_client_options({"allow_invalid_certificates": True}, environ={}) == {"verify": False}


def test_object_store_environment_names_fill_in_what_the_options_leave_out() -> None:
    environ = {"AWS_ENDPOINT": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1", "AWS_ALLOW_HTTP": "true"}
    assert s3_client_options({}, environ) == {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"}
    # boto3's own names it reads itself; the options win over the environment.
    assert s3_client_options({}, {**environ, "AWS_ENDPOINT_URL": "http://other:1", "AWS_DEFAULT_REGION": "x"}) == {}
    assert (
        s3_client_options({"endpoint": "https://s3.example.com"}, environ)["endpoint_url"] == "https://s3.example.com"
    )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"endpoint_ur": "http://h:1"}, "'endpoint_ur'"),
        ({"anonymous": True}, "'anonymous'"),
        ({"client_kwargs": {"endpoint": "http://h:1", "max_pool_connections": 3}}, "'max_pool_connections'"),
        ({"region": 5}, "'region'"),
        ({"allow_http": "perhaps"}, "'allow_http'"),
        ({"timeout": "soon"}, "'timeout'"),
        ({"timeout": -1}, "'timeout'"),
        ({"endpoint": "127.0.0.1:9000"}, "'127.0.0.1:9000'"),
        ({"endpoint": "http://a:1", "aws_endpoint": "http://b:1"}, "'http://b:1'"),
        ({"endpoint": "http://h:1", "allow_http": False}, "allow_http=False"),
        ({"config_kwargs": {"no_such_setting": 1}}, "no_such_setting"),
    ],
)
def test_bad_options_are_refused_naming_what_is_wrong(options: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        s3_client_options(options, environ={})
    assert named in str(raised.value)


def test_an_unknown_key_names_the_accepted_ones_before_any_request() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        litstore.open("s3://bucket/store", storage_options={"aws_endpoint": "http://127.0.0.1:1", "secret_key": "x"})
    message = str(raised.value)
    assert "'secret_key'" in message
    assert all(key in message for key in ("aws_endpoint", "endpoint_url", "key", "secret", "allow_http"))
    assert len(S3_KEYS) > 30
