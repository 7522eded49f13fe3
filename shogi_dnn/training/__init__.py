"""Training: the only part of the package that imports TensorFlow (schedule.py, throughput.py, plan.py and
memory.py do not).

  schedule.py     sample groups, stage seeds and read lanes: the data plan, TensorFlow-free
  pipeline.py     tf.data input from shards (train stream with resume position, evaluation)
  model.py        the value network (planes expanded on the device)
  devices.py      the strategy over the towers, benchmark devices, whether a model fits them
  optimizer.py    the optimizer and its lr schedule
  losses.py       the per-example loss (evaluation targets) and the metric sums
  steps.py        the distributed update and evaluation steps, tower timing
  assembly.py     a run's parts from the config (StepParts needs no data on disk)
  stages.py       StagePlan / TrainState: the run as stages over sample groups
  resume.py       a run's start: fresh or resumed, the data check, run.json
  interrupts.py   stop requests (signals) and stage input teardowns
  trainer.py      the training loop
  checkpoints.py  atomic checkpoints, restore, keep policy
  run_log.py      metrics.jsonl, TensorBoard and the console line
  cluster.py      several machines (MultiWorkerMirroredStrategy, TF_CONFIG)
  bind_shim.py    keeps a worker's TensorFlow server on its given host (LD_PRELOAD _bindshim.c)
  throughput.py   the throughput model time = B / v0 + t and per-GPU batch advice (TensorFlow-free)
  memory.py       parameter count and training memory from the config, checked before a model is built
  allocator.py    the C allocator keeps freed tensor memory (applied on import, before TensorFlow loads)
"""

from shogi_dnn.training.allocator import keep_freed_memory

keep_freed_memory()
