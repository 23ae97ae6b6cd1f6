"""The read path: the key index, open chunks, composed manifests, grouping by chunk."""
