"""Training: the only part of the package that imports TensorFlow (schedule.py, throughput.py, plan.py and memory.py do not).

  schedule.py     sample groups, stage seeds and read lanes: the data plan, TensorFlow-free
  pipeline.py     tf.data input from shards (train stream with resume position, evaluation)
  model.py        the value network (planes expanded on the device)
  towers.py       strategies, the distributed update and evaluation steps, the optimizer
  stages.py       StagePlan / TrainState: the run as stages over sample groups
  trainer.py      the training loop
  checkpoints.py  atomic checkpoints, restore, keep policy
  run_log.py      metrics.jsonl, TensorBoard and the console line
  cluster.py      several machines (MultiWorkerMirroredStrategy, TF_CONFIG)
  throughput.py   the throughput model time = B / v0 + t and per-GPU batch advice (TensorFlow-free)
  memory.py       parameter count and training memory from the config, checked before a model is built (TF-free)
"""
