# Two entry points for a fresh machine (see README.md): `make demo` and `make test`.
PYTHON ?= python3
RUN ?= runs/sample
DATA ?= runs/sample-data

.PHONY: install demo test bench clean

install:
	$(PYTHON) -m pip install -q -e ".[test]"

# The main job on the bundled sample: convert the records, train on every local device, evaluate, report.
demo: install
	$(PYTHON) -m shogi_dnn convert datasets/sample --out $(DATA) --shard-size 4096
	rm -rf $(RUN)
	$(PYTHON) -m shogi_dnn train --config train/cpu-smoke.toml --data $(DATA) --run-dir $(RUN)
	$(PYTHON) -m shogi_dnn evaluate --run-dir $(RUN) --split validation
	$(PYTHON) -m shogi_dnn report --run-dir $(RUN)

test: install
	$(PYTHON) -m pytest -q

bench: install
	$(PYTHON) -m shogi_dnn bench convert ../shared/kifu-gnushogi
	$(PYTHON) -m shogi_dnn bench train

clean:
	rm -rf runs
