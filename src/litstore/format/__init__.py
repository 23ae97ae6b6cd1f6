"""What a store's files hold, without I/O: paths (:mod:`.layout`), metadata models
(:mod:`.models`), the record encoding (:mod:`.codec`), hashes (:mod:`.hashing`) and
the manifest's columns (:mod:`.manifest`)."""
