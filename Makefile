# Two entry points for a fresh machine (see README.md): `make demo` and `make test`.
PYTHON ?= python3
RUN ?= runs/sample
DATA ?= runs/demo-data

.PHONY: install demo demo-engine notebook check test bench clean

install:
	$(PYTHON) -m pip install -q -e ".[test]"

# The main job on bundled data: convert the 1,886 GNU Shogi self-play games of datasets/gnushogi.tar.xz
# (read straight from the archive), train train/demo.toml on every local device, evaluate on the 174
# held-out validation games, draw the win-rate curve of one of them (a game the model never trained on),
# and end with one table: the model against the side-to-move, material and piece-square baselines.
DEMO_ARCHIVE = datasets/gnushogi.tar.xz
# Game 13 of this file is in the validation split (tests/test_datasets.py checks it).
DEMO_GAME_FILE = gnushogi/gnushogi-0000.csa
DEMO_GAME = 13

demo: install
	$(call DEMO_STEPS,$(DEMO_ARCHIVE),$(DATA),$(RUN),$(DEMO_GAME_FILE),$(DEMO_GAME))

# The steps of both demos: $(call DEMO_STEPS,archive,data folder,run folder,game file in the archive,game number)
define DEMO_STEPS
$(PYTHON) -m shogi_dnn convert $(1) --out $(2) --val-fraction 0.1 --quiet
rm -rf $(3)
$(PYTHON) -m shogi_dnn train --config train/demo.toml --data $(2) --run-dir $(3)
$(PYTHON) -m shogi_dnn evaluate --run-dir $(3) --split validation > $(3)/evaluate-validation.txt
@echo "evaluate: the details (by ply, calibration) are in $(3)/evaluate-validation.txt"
tar -xJf $(1) -C $(3) $(4)
$(PYTHON) -m shogi_dnn predict --run-dir $(3) --game $(5) --out $(3)/predict-validation-game.png \
    $(3)/$(4) > $(3)/predict-validation-game.txt
@echo "predict: win-rate curve of validation game $(5) of $(4): $(3)/predict-validation-game.png (table: .txt)"
$(PYTHON) -m shogi_dnn report --run-dir $(3) --summary
endef

# The second demo, on engine evaluations: 1,400 Fairy-Stockfish self-play games with the engine's score after
# every engine move (datasets/fairy.tar.xz; its fairy/README.md says how they were made). The same steps as
# `demo`; the network also learns from the evaluations (train/base.toml's evaluation targets), and the last
# table adds the engine's own evaluation and a piece-square regression beside the material baseline.
ENGINE_ARCHIVE = datasets/fairy.tar.xz
ENGINE_RUN ?= runs/sample-engine
ENGINE_DATA ?= runs/demo-engine-data
# Game 64 of this file is in the validation split (tests/test_datasets.py checks it).
ENGINE_GAME_FILE = fairy/fairy-0000.csa
ENGINE_GAME = 64

demo-engine: install
	$(call DEMO_STEPS,$(ENGINE_ARCHIVE),$(ENGINE_DATA),$(ENGINE_RUN),$(ENGINE_GAME_FILE),$(ENGINE_GAME))

# notebooks/walkthrough.ipynb on the demo's run (after `make demo`), executed without a browser; it writes only
# into $(RUN)/walkthrough/, the executed copy included (`jupyter lab notebooks/walkthrough.ipynb` to browse).
notebook:
	$(PYTHON) -m pip install -q -e ".[notebook]"
	SHOGI_DNN_RUN=$(RUN) $(PYTHON) -m jupyter nbconvert --to notebook --execute notebooks/walkthrough.ipynb \
	    --output-dir $(RUN)/walkthrough
	@echo "notebook: executed copy in $(RUN)/walkthrough/walkthrough.ipynb (plots, eval-validation.json, game.png beside it)"

# The static checks (pyproject.toml: [tool.ruff.lint], [tool.mypy]; the prose density baseline), then the tests.
check: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy
	$(PYTHON) scripts/prose_density.py shogi_dnn --check scripts/prose_baseline.json

test: check
	$(PYTHON) -m pytest -q

bench: install
	$(PYTHON) -m shogi_dnn bench convert        # the bundled datasets/gnushogi.tar.xz
	$(PYTHON) -m shogi_dnn bench train

clean:
	rm -rf runs
