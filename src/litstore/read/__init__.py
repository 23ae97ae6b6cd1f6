"""The read path: a version's engine, the one check-and-decode path, the key index, open chunks, composed manifests."""
