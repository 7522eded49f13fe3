"""The dataset format and what is computed from it (no TensorFlow): position encoding (features), the
optional C encoder and its loader (_encode.c, fast_encoding), HDF5 shards and manifest.json (shards), a
dataset's identity (identity) and the engine-evaluation fit (evalfit)."""
