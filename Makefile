# The README's two commands: `make reproduce` and `make test`.
# Both create .venv from the pinned lock on first use; nothing else is needed
# but Python 3.11+.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CORES  ?= all
STAMP  := $(VENV)/.installed

.PHONY: captions readme-figure demo circle-departure-law sphere sphere-zero-temperature sphere-departure sphere-convergence reproduce extensions circle mean-field-departure paper-scale paper-scale-beta1000 paper-scale-cost paper-scale-report gpu-paper-scale gpu-paper-scale-report w2-snapshots test lint test-faults test-torch test-slurm test-container bench venv report clean

$(STAMP): envs/requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-input -r envs/requirements.lock
	$(BIN)/python -m pip install --quiet --no-input --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP)

## reproduce: run the default config (config/config.yaml) on all cores; figures in results/<experiment>/figures/
reproduce: $(STAMP)
	$(BIN)/snakemake --workflow-profile workflow/profiles/default --cores $(CORES)
	$(BIN)/snakemake --workflow-profile workflow/profiles/default --report results/report.html

## demo: a small run to look at (config/demo.yaml: one experiment on S², one on S¹; 1-2 minutes on 2 cores) and its
## report: figures and the tokens' animation in results/demo_sphere/figures/ and results/demo_circle/figures/, the
## report in results/demo_report.html. It leaves results/claims_summary.md (the default run's) alone.
DEMO := --workflow-profile workflow/profiles/default --configfile config/demo.yaml --omit-from claims_summary
demo: $(STAMP)
	$(BIN)/snakemake $(DEMO) --cores $(CORES)
	$(BIN)/snakemake $(DEMO) --report results/demo_report.html
	@echo
	@for e in demo_sphere demo_circle; do \
		echo "figures of $$e:   results/$$e/figures/ ($$(cd results/$$e/figures && ls *.png | tr '\n' ' '))"; \
		echo "animation of $$e: results/$$e/figures/tokens.gif"; \
	done
	@echo "report:    results/demo_report.html (every figure and animation with its caption)"
	@echo "claims:    results/demo_sphere/logs/claims.log, results/demo_circle/logs/claims.log"

## report: the Snakemake report (every figure with its caption) of a finished run, results/report.html;
## CONFIGFILE names the run's config (default config/config.yaml: the run `make reproduce` makes)
CONFIGFILE ?= config/config.yaml
report: $(STAMP)
	$(BIN)/snakemake --workflow-profile workflow/profiles/default --configfile $(CONFIGFILE) --report results/report.html

## readme-figure: the README's figures, copied from a finished `make reproduce`: the circle's mean field with particles
## beside it (docs/img/mean_field_circle_w2_projection.png) and the particles in d = 3 (docs/img/w2_projection.png)
readme-figure:
	cp results/mean_field_circle/figures/w2_projection.png docs/img/mean_field_circle_w2_projection.png
	cp results/concentration/figures/w2_projection.png docs/img/w2_projection.png

## extensions: Conjecture 1 beyond the symmetric case and the axisymmetric d = 3 mean field (config/extensions.yaml,
## kept out of `make reproduce` for its time); results/<experiment>/ and results/claims_summary.md
extensions: $(STAMP)
	$(BIN)/snakemake --workflow-profile workflow/profiles/default --cores $(CORES) --configfile config/extensions.yaml

## circle: the d = 2 experiment over four decades of beta (config/circle.yaml, ~20 min); results/circle/
circle: $(STAMP)
	$(BIN)/snakemake --workflow-profile workflow/profiles/default --cores $(CORES) --configfile config/circle.yaml

## mean-field-departure: the circle's mean-field reference at every beta of config/mean_field_circle.yaml against
## particles at N = 64 … 4096 (departure times, W2 particles-reference, where the particles stand for the mean field);
## regenerates docs/mean_field_departure.md and its figure docs/img/particle_regime_circle.png (BETAS= for fewer)
BETAS ?= 10 31.6 100 316 1000
mean-field-departure: $(STAMP)
	$(BIN)/python studies/mean_field_departure.py config/mean_field_circle.yaml --tokens 64 256 1024 4096 \
		--replicas 2 --w2-every 8 --betas $(BETAS) --markdown docs/mean_field_departure.md \
		--figure docs/img/particle_regime_circle.png

## circle-departure-law: which law in beta the circle's mean field departs by, at the rule's threshold and at
## q = 0.25 ... 0.75 of the way between the eigenspaces, from the mean field alone at two cell widths: beta = 10,
## 17.8, 31.6, 56.2 (docs/data/circle_departure_law.npz) and beta = 100, 316 in a run of its own
## (docs/data/circle_departure_law_high.npz), then the page docs/circle_departure_law.md rendered from both (the
## committed npz files come from runs of longer lists stopped after these beta, the same numbers: the page's stamp
## names what each npz holds; beta = 1000 would add about 25 min alone on 2 cores)
circle-departure-law: $(STAMP)
	$(BIN)/python studies/circle_departure_law.py config/mean_field_circle.yaml --betas 10 17.8 31.6 56.2 \
		--out docs/data/circle_departure_law.npz
	$(BIN)/python studies/circle_departure_law.py config/mean_field_circle.yaml --betas 100 316 \
		--out docs/data/circle_departure_law_high.npz
	$(BIN)/python studies/circle_departure_law.py --render docs/data/circle_departure_law.npz \
		docs/data/circle_departure_law_high.npz --markdown docs/circle_departure_law.md

## paper-scale-cost: the paper-scale run's cost per job from the resource model, before running it
paper-scale-cost: $(STAMP)
	$(BIN)/python reports/estimate_cost.py config/paper_scale.yaml --cores $(or $(filter-out all,$(CORES)),2)

## paper-scale: d = 3 at N = 16 384 (config/paper_scale.yaml), with its particle-number study; about 3 h on 2 cores
## (docs/paper_scale.md), so PROFILE=slurm sends it through the SLURM profile
PROFILE ?= default
paper-scale: paper-scale-cost
	$(BIN)/snakemake --workflow-profile workflow/profiles/$(PROFILE) --cores $(CORES) all convergence_all --configfile config/paper_scale.yaml

## paper-scale-beta1000: the same at beta = 1000 only (config/overrides/paper_scale_beta1000.yaml merged over it): about
## 1.2 h on 2 cores by the resource model (make paper-scale-cost prints it first)
paper-scale-beta1000: $(STAMP)
	$(BIN)/python reports/estimate_cost.py config/paper_scale.yaml config/overrides/paper_scale_beta1000.yaml --cores $(or $(filter-out all,$(CORES)),2)
	$(BIN)/snakemake --workflow-profile workflow/profiles/$(PROFILE) --cores $(CORES) all convergence_all --configfile config/paper_scale.yaml config/overrides/paper_scale_beta1000.yaml

## paper-scale-report: docs/paper_scale_results.md and its figures (docs/img/paper_scale_*.png), generated from a
## finished paper-scale run's results/ (claims, particle-number study, cost against the estimate, commit, CPU, wall
## time); PAPER_SCALE_CONFIG names the run's config files (default: the beta = 1000 run)
PAPER_SCALE_CONFIG ?= config/paper_scale.yaml config/overrides/paper_scale_beta1000.yaml
paper-scale-report: $(STAMP)
	$(BIN)/python reports/paper_scale_report.py results --config $(PAPER_SCALE_CONFIG) \
		--markdown docs/paper_scale_results.md --images docs/img

## gpu-paper-scale: on a machine with a CUDA device and PyTorch, the paper-scale simulation at GPU_BETA with the field on
## the GPU (kernel torch), timed against the CPU kernels; writes docs/data/gpu_paper_scale/beta<GPU_BETA>/ (install
## PyTorch into .venv first: `.venv/bin/pip install torch`)
GPU_BETA ?= 1000
gpu-paper-scale: $(STAMP)
	$(BIN)/python studies/gpu_paper_scale.py run config/paper_scale.yaml --beta $(GPU_BETA) \
		--out docs/data/gpu_paper_scale/beta$(GPU_BETA) --commit $$(git rev-parse --short HEAD)

## gpu-paper-scale-report: docs/gpu_paper_scale.md from the GPU runs' files and the CPU paper-scale run in results/
gpu-paper-scale-report: $(STAMP)
	$(BIN)/python studies/gpu_paper_scale.py report $(wildcard docs/data/gpu_paper_scale/beta*) --results results \
		--backends docs/data/gpu_paper_scale/backends.json --markdown docs/gpu_paper_scale.md

## sphere: the paper's setting on the mean field itself (config/sphere.yaml: d = 3, `concentration`'s matrices, the
## S² mesh reference at beta = 10, 100, 1000 to t = 14 with particles measured against it; 50 min 36 s from a
## fresh clone on 2 AMD EPYC cores, nothing beside it), then
## docs/sphere_results.md and its figures (docs/img/sphere_*.png; sphere_w2_projection.png leads the README) generated
## from its outputs
sphere: $(STAMP)
	$(BIN)/python reports/estimate_cost.py config/sphere.yaml --cores $(or $(filter-out all,$(CORES)),2)
	$(BIN)/snakemake --workflow-profile workflow/profiles/default --cores $(CORES) --configfile config/sphere.yaml
	$(BIN)/python reports/sphere_report.py results --config config/sphere.yaml --markdown docs/sphere_results.md \
		--images docs/img
	@test -s docs/img/sphere_w2_projection.png || { echo "make sphere: the README's figure was not written"; exit 1; }

## sphere-zero-temperature: docs/sphere_zero_temperature.md, the ALE sphere mesh moved by the zero-temperature field to
## t = 30 against the exact solution (W2 to the projection, log-density at the Laplace point; about 10 min on 2 cores)
sphere-zero-temperature: $(STAMP)
	$(BIN)/python studies/sphere_zero_temperature.py --markdown docs/sphere_zero_temperature.md

## sphere-departure: docs/sphere_departure.md and docs/img/particle_regime_sphere.png, the d = 3 mean field of
## `concentration` (the S² mesh solver at two levels with `make sphere`'s reference settings) against its particles
## at N = 256 … 16 384, where in (log N, log beta) they stand for it, and where the mean field ends (Conjecture 1):
## beta = 10 to t = 14, 31.6 to t = 20 and 100 to t = 30, each about ten time units past its mean field's departure,
## on levels 2, 3 (level 2 coarser than the kernel at beta = 100, its softmax finer; levels 3, 4, as `make sphere`
## takes, would add hours), its npz rewritten after each beta; then beta = 316 to t = 40 in a run of its own at
## N = 256, 1024 only (N = 16 384 to t = 40 would add about half an hour, and at beta = 100 it already departs
## before the mean field); beta = 178 to t = 26 likewise (a fifth beta for the law at every threshold: its onset,
## a quarter to two fifths of the way from E1(A) to V's eigenspace, lies before t = 18); beta = 1000 to t = 60 on
## levels 3, 4 (levels 2, 3 are too coarse for its kernel), the two levels side by side (`--jobs 2`), each ending
## where it outgrows max_triangles or the flow outruns what it resolves (the page names where and why), each level's
## state checkpointed at every stop in docs/data/checkpoints/ (committed while the run is unfinished: it takes
## longer than a working day on 2 cores, and started again goes on from there to the same numbers; removed once the
## npz holds the beta); the page and picture rendered from the four npz files
## (`--render`)
sphere-departure: $(STAMP)
	$(BIN)/python studies/sphere_departure.py --betas 10 31.6 100 --horizons 14 20 30 --levels 2 3 \
		--tokens 256 1024 4096 16384 --replicas 2 --max-triangles 40000 --out docs/data/sphere_departure.npz
	$(BIN)/python studies/sphere_departure.py --betas 316 --horizons 40 --levels 2 3 --tokens 256 1024 \
		--replicas 2 --max-triangles 40000 --out docs/data/sphere_departure_beta316.npz
	$(BIN)/python studies/sphere_departure.py --betas 178 --horizons 26 --levels 2 3 --tokens 256 1024 \
		--replicas 2 --max-triangles 40000 --out docs/data/sphere_departure_beta178.npz
	$(BIN)/python studies/sphere_departure.py --betas 1000 --horizons 60 --levels 3 4 --tokens 256 1024 \
		--replicas 2 --max-triangles 40000 --jobs 2 --checkpoints docs/data/checkpoints/sphere_departure_beta1000 \
		--out docs/data/sphere_departure_beta1000.npz
	$(BIN)/python studies/sphere_departure.py --render docs/data/sphere_departure.npz \
		docs/data/sphere_departure_beta316.npz docs/data/sphere_departure_beta178.npz \
		docs/data/sphere_departure_beta1000.npz \
		--markdown docs/sphere_departure.md --figure docs/img/particle_regime_sphere.png

## sphere-convergence: docs/sphere_convergence.md, the d = 3 reference of config/sphere.yaml at beta = 10 to t = 6 with
## its mesh level (2, 3, 4), pruning depth (10, 20, 40), rtol (1e-2, 1e-3, 1e-4) and remeshing interval (0.25, 0.125,
## 0.0625) varied one at a time: each family's departures against one snapshot interval, its differences and observed
## order, and which resolution limits the reference most; the page is rewritten after each run. Then
## docs/sphere_convergence_beta100.md: beta = 100 to t = 8 from level 3, its level (3, 4) and remeshing interval varied
sphere-convergence: $(STAMP)
	$(BIN)/python studies/sphere_convergence.py --beta 10 --horizon 6 \
		--markdown docs/sphere_convergence.md --out docs/data/sphere_convergence.npz
	$(BIN)/python studies/sphere_convergence.py --beta 100 --horizon 8 --levels 3 4 --depths 20 --rtols 1e-3 \
		--markdown docs/sphere_convergence_beta100.md --out docs/data/sphere_convergence_beta100.npz

## test: the whole test suite (unit, property, end to end through Snakemake)
test: $(STAMP)
	$(BIN)/python -m pytest

## lint: snakemake --lint finds nothing, the workflow files are snakefmt-formatted, the Python is ruff-clean and
## ruff-formatted (also part of make test); `ruff format .` and `ruff check --fix .` repair most findings
lint: $(STAMP)
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile workflow/Snakefile workflow/rules
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## captions: workflow/report/figure.rst, the report's figure captions, written from lowtemp.plotting.figures.captions()
## (the same constants the figures' axes are drawn with; make test fails when the file differs)
captions: $(STAMP)
	$(BIN)/python -c "from lowtemp.plotting import figures; open('workflow/report/figure.rst', 'w').write(figures.caption_template())"

## test-faults: fault injection (SIGKILL mid-run and mid-write, resume bit for bit), bounded in time
test-faults: $(STAMP)
	$(BIN)/python -m pytest tests/faults -p no:cacheprovider

## test-torch: the optional PyTorch field (kernel: torch) against the dense kernel; installs PyTorch's CPU build into
## .venv (the kernel then imports it in every job: run this last, as .ci/run does)
TORCH := torch==2.13.0
test-torch: $(STAMP)
	$(BIN)/python -m pip install --quiet --no-input '$(TORCH)'
	LOWTEMP_REQUIRE_TORCH=1 $(BIN)/python -m pytest tests/dynamics/test_torch_field.py tests/dynamics/test_kernel_contract.py \
		tests/workflow/test_gpu_paper_scale.py -p no:cacheprovider

## test-slurm: a real single-node SLURM cluster (started here, as root) runs config/test.yaml; numbers equal a local run
test-slurm: $(STAMP)
	bash tests/slurm/run.sh

## test-container: build envs/Containerfile with podman on a debootstrap base, run config/test.yaml inside, compare numbers
test-container: $(STAMP)
	bash tests/container/run.sh

## bench: kernel, integrator, mean-field solver and W2 benchmarks (tables on stdout, results/bench/bench.nc,
## integrators.nc (its table also in docs/integrators_bench.md), docs/mean_field_bench.md, docs/sphere_mean_field_bench.md,
## docs/sphere_accuracy_bench.md (the S² mesh against particles at equal W2 accuracy) and w2.nc); the W2 solvers side by
## side at N = 2048 ... 65536 with per-solve peak memory, OR-tools' assignment (the `truth` extra of pyproject.toml,
## installed here) as the independent truth up to 16384 (about an hour on 2 cores, most of it POT and OR-tools)
TRUTH := ortools==9.15.6755
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet --no-input '$(TRUTH)'
	$(BIN)/python benchmarks/bench_kernels.py --out results/bench/bench.nc
	$(BIN)/python benchmarks/bench_integrators.py --out results/bench/integrators.nc --markdown docs/integrators_bench.md
	$(BIN)/python benchmarks/bench_meanfield.py --markdown docs/mean_field_bench.md
	$(BIN)/python benchmarks/bench_sphere_meanfield.py --markdown docs/sphere_mean_field_bench.md
	$(BIN)/python benchmarks/bench_sphere_accuracy.py --markdown docs/sphere_accuracy_bench.md
	$(BIN)/python benchmarks/bench_w2.py --sizes 2048 4096 16384 65536 --memory --truth-max 16384 --job-share results --out results/bench/w2.nc

## w2-snapshots: the default run's exact-W2 snapshots (concentration, beta = 100, replica 0, every 4th of 80: t = 0, 1,
## ..., 20) simulated at N = 4096, and every 8th at 16384 (t = 0, 2, ..., 20), each solved by w2_exact and by ot.emd2;
## the table in docs/w2_snapshots.md (about 25 min on 2 cores, most of it ot.emd2 at 16384; peak memory 11 GB, POT's
## dense problem at 16384)
w2-snapshots: $(STAMP)
	$(BIN)/python benchmarks/w2_snapshot_clouds.py --tokens 4096 16384 --out results/bench/w2_snapshots
	$(BIN)/python benchmarks/bench_w2.py --lazy-max 0 --truth-max 0 --repeats 2 --every 4 8 \
		--out results/bench/w2_snapshots.nc \
		--snapshots results/bench/w2_snapshots/N4096/beta100.nc results/bench/w2_snapshots/N4096/zero_temperature.nc \
		--snapshots results/bench/w2_snapshots/N16384/beta100.nc results/bench/w2_snapshots/N16384/zero_temperature.nc \
		--markdown docs/w2_snapshots.md

## clean: remove results/, .snakemake/ and numba's on-disk caches (one directory per version of the package's
## sources accumulates there; the next run compiles afresh, about a minute)
clean:
	rm -rf results .snakemake workflow/lowtemp/__pycache__/numba
