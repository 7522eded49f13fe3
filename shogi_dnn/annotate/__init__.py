"""`shogi-dnn annotate`: a USI engine's labels for a dataset (docs/annotate.md).

  usi_client.py   one USI engine process: options, `go nodes N` with a deadline, kill and restart
  plan.py         AnnotateSettings, the chunks, the off-path draw and random walks (from the manifest)
  worker.py       one chunk labelled by one engine; a crash or a hang costs one position
  output.py       the annotated dataset folder: shards, manifest, report, resume state
  job.py          run_annotate: worker threads, chunk files, resume, Ctrl-C/SIGTERM
"""
