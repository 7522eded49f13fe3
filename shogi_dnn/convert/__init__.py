"""The convert job: game records (files, folders, archives) -> filtered, split, encoded games -> HDF5 shards.

  sources.py   record files from files, folders and archives (zip, tar, 7z), read in order
  filters.py   ConvertSettings, the game filters and the train/validation/test split
  worker.py    one file -> parsed, filtered, encoded games (runs in worker processes)
  writer.py    DatasetWriter: games -> shard files, manifest, convert-report.json, resume state
  run.py       run_convert: the job itself (workers, writer, progress, signals); its public names
"""
