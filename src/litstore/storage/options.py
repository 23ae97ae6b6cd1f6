"""``storage_options`` for S3, as users of other libraries write them, mapped to boto3's client arguments.

One dictionary configures the store and its streaming (litdata builds a boto3 client
from it), so whatever a user writes is turned into boto3 client keyword arguments
here, once, and refused here if it cannot be. Accepted, case-insensitively:

- boto3's own: ``endpoint_url``, ``region_name``, ``aws_access_key_id``,
  ``aws_secret_access_key``, ``aws_session_token``, ``config`` (a ``botocore.config.Config``),
  ``verify``, ``use_ssl``;
- object_store's (Lance, Delta Lake, polars, obstore), with or without ``aws_``:
  ``endpoint``, ``endpoint_url``, ``region``, ``default_region``, ``access_key_id``,
  ``secret_access_key``, ``session_token``, ``token``, ``allow_http``,
  ``allow_invalid_certificates``, ``skip_signature``, ``virtual_hosted_style_request``,
  ``timeout``, ``connect_timeout``, ``read_timeout`` (seconds, or ``"30s"``, ``"500ms"``, ``"2min"``);
- fsspec's (s3fs): ``key``, ``secret``, ``token``, ``endpoint_url``, ``anon``, ``use_ssl``,
  ``client_kwargs`` (boto3 client arguments), ``config_kwargs`` (``Config`` arguments).

The environment fills in what the options leave out, as boto3 does
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...), plus object_store's own names:
``AWS_ENDPOINT``, ``AWS_REGION`` and ``AWS_ALLOW_HTTP``.

Anything else raises :class:`~litstore.errors.InvalidArgumentError` naming the accepted
keys: a misspelt key must not be dropped (the store would silently talk to AWS).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from litstore.errors import InvalidArgumentError

__all__ = ["S3_KEYS", "s3_client_options"]

#: Accepted key (lower case) -> the boto3 client argument it sets.
_CLIENT_ARGUMENTS: dict[str, str] = {
    "endpoint_url": "endpoint_url",
    "aws_endpoint_url": "endpoint_url",
    "endpoint": "endpoint_url",
    "aws_endpoint": "endpoint_url",
    "region_name": "region_name",
    "region": "region_name",
    "aws_region": "region_name",
    "default_region": "region_name",
    "aws_default_region": "region_name",
    "aws_access_key_id": "aws_access_key_id",
    "access_key_id": "aws_access_key_id",
    "key": "aws_access_key_id",
    "aws_secret_access_key": "aws_secret_access_key",
    "secret_access_key": "aws_secret_access_key",
    "secret": "aws_secret_access_key",
    "aws_session_token": "aws_session_token",
    "session_token": "aws_session_token",
    "aws_token": "aws_session_token",
    "token": "aws_session_token",
    "verify": "verify",
    "use_ssl": "use_ssl",
}
#: Accepted keys (lower case) that set ``botocore.config.Config`` arguments, or flags handled below.
_CONFIG_KEYS = {"config", "config_kwargs", "client_kwargs", "timeout", "connect_timeout", "read_timeout"}
_FLAG_KEYS = {"allow_http", "allow_invalid_certificates", "skip_signature", "virtual_hosted_style_request", "anon"}
_AWS_PREFIXED_FLAGS = {f"aws_{flag}" for flag in _FLAG_KEYS - {"anon"}}

#: Every key ``storage_options`` may hold for an S3 store (lower case; case does not matter).
S3_KEYS: frozenset[str] = frozenset(_CLIENT_ARGUMENTS) | _CONFIG_KEYS | _FLAG_KEYS | _AWS_PREFIXED_FLAGS

_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|sec|secs|seconds?|m|min|mins|minutes?)?\s*")
_SCALE = {"ms": 0.001, "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0}


def s3_client_options(options: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """boto3 S3 client keyword arguments for ``options`` (any of the spellings above) and the environment.

    Raises:
        InvalidArgumentError: a key no spelling accepts, a value of the wrong type, or
            options that contradict each other (``allow_http=False`` with an ``http://`` endpoint).
    """
    environ = os.environ if environ is None else environ
    if options is not None and not isinstance(options, Mapping):
        raise InvalidArgumentError(f"storage_options must be a dict, got {type(options).__name__}")
    given = {_lower(name): value for name, value in (options or {}).items()}
    unknown = sorted(name for name in given if name not in S3_KEYS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown storage_options key(s) {', '.join(map(repr, unknown))} for an s3:// store; accepted keys "
            f"(any case): {', '.join(sorted(S3_KEYS))}"
        )
    client: dict[str, Any] = {}
    config: dict[str, Any] = {}
    flags: dict[str, bool] = {}
    for name, value in given.items():
        if name in _CLIENT_ARGUMENTS:
            _set(client, _CLIENT_ARGUMENTS[name], value, name)
        elif name == "client_kwargs":
            for inner, inner_value in _mapping(value, name).items():
                if _lower(inner) not in _CLIENT_ARGUMENTS:
                    raise InvalidArgumentError(
                        f"storage_options['client_kwargs'] key {inner!r} is not a boto3 client argument litstore "
                        f"passes on; accepted: {', '.join(sorted(set(_CLIENT_ARGUMENTS.values())))}"
                    )
                _set(client, _CLIENT_ARGUMENTS[_lower(inner)], inner_value, f"client_kwargs[{inner!r}]")
        elif name == "config_kwargs":
            config.update(_mapping(value, name))
        elif name == "config":
            client["config"] = value
        elif name in ("timeout", "read_timeout"):
            config["read_timeout"] = _seconds(value, name)
        elif name == "connect_timeout":
            config["connect_timeout"] = _seconds(value, name)
        else:
            flags[name.removeprefix("aws_")] = _flag(value, name)
    _from_environment(client, flags, environ)
    return _finish(client, config, flags)


def _from_environment(client: dict[str, Any], flags: dict[str, bool], environ: Mapping[str, str]) -> None:
    """object_store's environment names that boto3 does not read (boto3 reads its own itself)."""
    boto_endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if "endpoint_url" not in client and not boto_endpoint and environ.get("AWS_ENDPOINT"):
        client["endpoint_url"] = environ["AWS_ENDPOINT"]
    if "region_name" not in client and not environ.get("AWS_DEFAULT_REGION") and environ.get("AWS_REGION"):
        client["region_name"] = environ["AWS_REGION"]
    if "allow_http" not in flags and environ.get("AWS_ALLOW_HTTP"):
        flags["allow_http"] = _flag(environ["AWS_ALLOW_HTTP"], "AWS_ALLOW_HTTP")


def _finish(client: dict[str, Any], config: dict[str, Any], flags: dict[str, bool]) -> dict[str, Any]:
    endpoint = client.get("endpoint_url")
    if endpoint is not None and not re.match(r"https?://[^/\s]+", str(endpoint)):
        raise InvalidArgumentError(f"storage_options endpoint {endpoint!r} is not an http:// or https:// URL")
    if flags.get("allow_http") is False and str(endpoint or "").startswith("http://"):
        raise InvalidArgumentError(
            f"storage_options set allow_http=False but the endpoint {endpoint!r} is plain http: "
            "use an https:// endpoint or allow_http=True"
        )
    if flags.get("allow_invalid_certificates"):
        client["verify"] = False
    if "virtual_hosted_style_request" in flags:
        style = "virtual" if flags["virtual_hosted_style_request"] else "path"
        config["s3"] = {**config.get("s3", {}), "addressing_style": style}
    if flags.get("skip_signature") or flags.get("anon"):
        from botocore import UNSIGNED

        config["signature_version"] = UNSIGNED
    if config:
        from botocore.config import Config

        try:
            extra = Config(**config)
        except TypeError as exc:
            raise InvalidArgumentError(
                f"storage_options config_kwargs {sorted(config)} are not Config's: {exc}"
            ) from exc
        client["config"] = client["config"].merge(extra) if isinstance(client.get("config"), Config) else extra
    return client


def _lower(name: Any) -> str:
    if not isinstance(name, str):
        raise InvalidArgumentError(f"storage_options keys are strings, got {name!r}")
    return name.lower()


def _set(client: dict[str, Any], argument: str, value: Any, name: str) -> None:
    if argument in ("verify", "use_ssl"):
        client[argument] = value if argument == "verify" and isinstance(value, str) else _flag(value, name)
        return
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"storage_options[{name!r}] must be a non-empty string, got {value!r}")
    previous = client.get(argument)
    if previous is not None and previous != value:
        raise InvalidArgumentError(
            f"storage_options give {argument} twice with different values ({previous!r} and {value!r}, from {name!r})"
        )
    client[argument] = value


def _mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"storage_options[{name!r}] must be a dict, got {value!r}")
    return value


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    raise InvalidArgumentError(f"storage_options[{name!r}] must be true or false, got {value!r}")


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    matched = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if matched is None or float(matched.group(1)) <= 0:
        raise InvalidArgumentError(
            f"storage_options[{name!r}] must be a positive duration (seconds, or '30s', '500ms', '2min'), got {value!r}"
        )
    return float(matched.group(1)) * _SCALE.get(matched.group(2) or "s", 1.0)
