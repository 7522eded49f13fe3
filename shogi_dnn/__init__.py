"""shogi-dnn: convert shogi game records to HDF5 shards and train win-prediction networks."""

__version__ = "0.1.0"
