"""Run and dataset folders on disk (no TensorFlow): every RUN/ file name and the one atomic write
(run_files), and the writer lock of a run or dataset folder (locks)."""
