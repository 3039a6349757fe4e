"""``mfd reproduce``: the main job, built around the real Qwen target (about an hour on a 2-core CPU, install included; the times are in docs/benchmarks.md): the theory on exact multi-future distributions, the shipped real targets' lossless check and ceiling (``mfd real``), and the drafters shipped for the real Qwen target measured on all 164 HumanEval problems (``mfd tau --preset reproduce``: every tree's tau at the same N, two problems decoded for real and timed); then the theory notebooks' figures into ``paper_figs/`` and ``mfd report --record results``, which copies the results into the committed records (``records/results/``; refused for a run from a dirty tree) and rewrites the result blocks of ``docs/`` and the tracked figures from them. ``--part drafters`` runs the small drafter study instead (``mfd real-drafters --preset reproduce``: drafters trained here, three seeds per kind, compared on a few HumanEval and prose prompts decoded for real; about 45 minutes); ``--part toy`` runs the small self-trained targets (the e2e grid, the hybrid GDN target, the own-target pipeline, natural text; 102 minutes from a clean clone on the 2-core AMD EPYC, records/toy-2026-12-07/).

Runs every experiment from its preset file (``experiments/<command>/<preset>.toml``) into
``results/`` (each skips work already saved, so an interrupted run resumes from its caches),
executes the notebooks of its part, which draw the figures into ``paper_figs/``, and finally runs
``mfd report --record results``.

The main part runs its steps one after another on every core: the real targets' steps use both
torch threads, and the drafters' evaluation times its decoding, so nothing runs beside it. In the
toy part, where two cores are usable, the work that times nothing runs first in two lanes, each
pinned to its own core with one torch thread: lane 0 trains the attention end-to-end run's
checkpoints (three drafter sets), lane 1 trains the hybrid run's and prepares natural text
(corpus, target, ceiling, drafters). The timed evaluations then run one after another, alone
(unpinned, the lane-1 worker gone): on the 2-core machine this package is developed on, a process
busy on the other core slowed decoding by 13-23% and moved speedups by up to 19% (measured
2026-11-30), so nothing runs beside a timed evaluation. ``--jobs 1`` runs every step in turn.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import time
from pathlib import Path

from mfd_theory.configs.options import Checked, Command, opt, numerics_opt

ROOT = Path(__file__).resolve().parents[2]  # mfd_theory/reproduce/__init__.py

# (label, module, argv); each module exposes main(argv). Every step starts from a preset file of
# experiments/ (experiments/README.md says why each one is sized as it is).
THEORY: list[tuple[str, str, list[str]]] = [
    ("core table", "mfd_theory.commands.theory.core_table",
     ["--preset", "default", "--figure", "paper_figs/coverage_vs_budget.png"]),
    ("chimera bound", "mfd_theory.commands.theory.chimera_bound", ["--preset", "default"]),
    ("chimera share", "mfd_theory.commands.theory.chimera_share", ["--preset", "default"]),
    ("mixture gain", "mfd_theory.commands.theory.mixture_gain", ["--preset", "default"]),
    ("path gain", "mfd_theory.commands.theory.path_gain", ["--preset", "default"]),
    ("best mode", "mfd_theory.commands.theory.best_mode", ["--preset", "default"]),
]
E2E = ("end to end", "mfd_theory.commands.experiments.e2e", ["--preset", "default", "--out", "results"])
HYBRID = ("end to end, hybrid target", "mfd_theory.commands.experiments.e2e", ["--preset", "hybrid", "--out", "results/hybrid"])
OWN = ("own target", "mfd_theory.commands.experiments.own_target", ["--preset", "default", "--out", "results/own_target"])
NATURAL = ("natural text", "mfd_theory.commands.experiments.natural", ["--preset", "default", "--out", "results/natural"])
#: the shipped real targets (untimed: the lossless check and the ceiling), on every core
REAL = ("real targets", "mfd_theory.commands.experiments.real", ["--preset", "reproduce", "--out", "results/real",
                                                                  "--figure", "paper_figs/real_ceiling.png"])
#: the drafters shipped for the real Qwen target (drafters/), measured on all 164 HumanEval problems:
#: tau of every tree at the same N, and two problems decoded for real (timed: speedups)
SHIPPED = ("shipped drafters", "mfd_theory.commands.pipeline.tau", ["--preset", "reproduce", "--out", "results/shipped"])
#: the small drafter study: drafters trained here for the real Qwen target, 3 seeds per kind, compared on
#: a few HumanEval and prose prompts decoded for real (timed: speedups)
REAL_DRAFTERS = ("real drafters", "mfd_theory.commands.experiments.real_drafters",
                 ["--preset", "reproduce", "--out", "results/real-drafters",
                  "--figure", "paper_figs/real_drafters_gains.png"])
#: each part's steps, in the order one core runs them (``--jobs 1``): the main job is the real
#: target's; the toy part keeps what a self-trained small target shows (exact known futures of a
#: grammar, the hybrid GDN path, the own-target pipeline, natural text trained from scratch)
PARTS: dict[str, list[tuple[str, str, list[str]]]] = {"main": [*THEORY, REAL, SHIPPED],
                                                      "drafters": [REAL_DRAFTERS],
                                                      "toy": [E2E, HYBRID, OWN, NATURAL]}
#: every step of every part
STEPS: list[tuple[str, str, list[str]]] = [*PARTS["main"], *PARTS["drafters"], *PARTS["toy"]]
#: steps with a --threads option (torch threads for training) and a --prepare-only option
#: (everything before the timed evaluation: training, and natural's ceiling)
THREADED = {E2E[0], HYBRID[0], OWN[0], NATURAL[0]}
PREPARED = {E2E[0], HYBRID[0], NATURAL[0]}
#: steps whose run times decoding: nothing runs on the other core while they do
TIMED = {E2E[0], HYBRID[0], OWN[0], NATURAL[0], REAL_DRAFTERS[0], SHIPPED[0]}


def plan(jobs: int, part: str = "main") -> list[list[tuple[str, str, list[str], str]]]:
    """The lanes of ``part`` (a key of :data:`PARTS`): one list of ``(label, module, argv, what)``
    per core, ``what`` being "run" (the whole step) or "prepare" (``--prepare-only``: everything
    before its timed evaluation). Lane 1 holds untimed work only; a "run" of a timed step
    (:data:`TIMED`) on lane 0 waits until lane 1 has finished everything. The main and drafters parts
    are one lane whatever ``jobs`` says: their real-target steps use every core themselves."""
    if part not in PARTS:
        raise ValueError(f"part: {part!r} is not one of {sorted(PARTS)}")
    steps = PARTS[part]
    if jobs == 1 or part != "toy":
        return [[(*s, "run") for s in steps]]
    # balanced on the run of 2026-12-01: e2e's three drafter sets (about 15 min) against the
    # hybrid's one set and natural's target, ceiling and drafters (about 23 min)
    return [[(*E2E, "prepare"), (*E2E, "run"), (*HYBRID, "run"), (*OWN, "run"), (*NATURAL, "run")],
            [(*HYBRID, "prepare"), (*NATURAL, "prepare")]]


def step_argv(label: str, argv: list[str], what: str, jobs: int, quiet: bool) -> list[str]:
    extra = ["--prepare-only"] if what == "prepare" else []
    if jobs > 1 and label in THREADED:
        extra += ["--threads", "1"]  # one core per lane
    return list(argv) + extra + (["--quiet"] if quiet else [])


def _run_step(module: str, argv: list[str]) -> float:
    t0 = time.perf_counter()
    importlib.import_module(module).main(argv)
    return time.perf_counter() - t0


def _lane_init(cpu: int | None, log: str) -> None:
    """A lane's worker process: pinned to its core, one thread per library, output to ``log``."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = "1"
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _chain(pool, jobs: list) -> None:
    """Run ``jobs`` (``(module, argv, future)``) on ``pool`` one after another: each is submitted
    when the one before it succeeded, and its outcome goes to its ``future``; after a failure the
    rest are not run (their futures say so)."""
    if not jobs:
        return
    (module, argv, out), rest = jobs[0], jobs[1:]

    def done(f) -> None:
        if f.cancelled() or f.exception() is not None:
            out.set_exception(f.exception() if not f.cancelled() else RuntimeError("cancelled"))
            for *_, later in rest:
                later.set_exception(RuntimeError("not run: an earlier step of its lane failed"))
            return
        out.set_result(f.result())
        try:
            _chain(pool, rest)
        except RuntimeError as exc:  # the pool was shut down (the run is stopping)
            for *_, later in rest:
                if not later.done():
                    later.set_exception(exc)

    pool.submit(_run_step, module, argv).add_done_callback(done)


def lane_cpus(jobs: int) -> list[int | None]:
    """The core each lane is pinned to (None: not pinned, where the platform cannot pin)."""
    if not hasattr(os, "sched_getaffinity"):
        return [None] * jobs
    cpus = sorted(os.sched_getaffinity(0))
    return [cpus[i] for i in range(jobs)]


def usable_cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_jobs() -> int:
    return 2 if usable_cores() >= 2 else 1


#: the notebooks of each part (each draws its figures from that part's results)
PART_NOTEBOOKS: dict[str, list[str]] = {
    "main": ["notebooks/01_chimera_bound.ipynb", "notebooks/02_chimera_share.ipynb",
             "notebooks/03_mixture_gain.ipynb", "notebooks/05_path_gain.ipynb"],
    "drafters": [],
    "toy": ["notebooks/04_end_to_end.ipynb"],
}
NOTEBOOKS: list[str] = sorted(nb for nbs in PART_NOTEBOOKS.values() for nb in nbs)


def run_notebook(path: Path, small: bool = False, timeout: int = 1800):
    """Execute a notebook from its own folder and return the executed copy.

    The file on disk is not modified (notebooks are committed without outputs). ``small`` sets
    MFD_NOTEBOOK_SMALL=1, which the notebooks read to run a tiny version (into
    ``results/notebook_small/``, see :func:`mfd_theory.figures.notebook_output`).
    """
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    # the kernel inherits the environment: MFD_NOTEBOOK_SMALL picks the size, and MPLBACKEND is
    # removed so the kernel uses its inline backend and the executed copy holds the images
    saved = {k: os.environ.get(k) for k in ("MFD_NOTEBOOK_SMALL", "MPLBACKEND")}
    os.environ["MFD_NOTEBOOK_SMALL"] = "1" if small else "0"
    os.environ.pop("MPLBACKEND", None)
    try:
        # The kernel's log level ERROR drops its start-up warning about running over TCP (the
        # kernel talks only to this process, on the local machine).
        NotebookClient(nb, timeout=timeout, kernel_name="python3", extra_arguments=["--IPKernelApp.log_level=ERROR"],
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        return nb
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclasses.dataclass(frozen=True)
class ReproduceConfig(Checked):
    part: str = opt("main", "main: the theory and the real Qwen target (the shipped targets' lossless check and ceiling, "
                            "the shipped drafters measured on all of HumanEval); drafters: the small drafter study "
                            "(drafters trained here, 3 seeds per kind, compared on a few prompts); toy: the small "
                            "self-trained targets (the e2e grid, the hybrid GDN target, the own-target pipeline, natural "
                            "text)", choices=tuple(PARTS))
    skip_notebooks: bool = opt(False, "run the experiments only, draw no figures")
    jobs: int | None = opt(None, "the toy part's lanes: 1: every step in turn on the machine's threads; 2: the untimed work (training, "
                                 "the theory, natural text's ceiling) first in two lanes, each pinned to its own core "
                                 "with one torch thread, then the timed evaluations alone, with nothing else running",
                           unset="2 where two cores are usable, else 1", choices=(1, 2))
    numerics: str | None = numerics_opt()

    def validate(self) -> None:
        usable = usable_cores()
        if self.jobs is not None and self.jobs > usable:
            raise ValueError(f"--jobs: {self.jobs} lanes need {self.jobs} usable cores, this process may use {usable}")


CLI = Command("reproduce", __name__, ReproduceConfig, __doc__, out=False, examples=(
    "mfd reproduce  # the main job, then docs/ rewritten from the new results",
    "mfd reproduce --part toy  # the small self-trained targets' runs (make toy)",
    "mfd reproduce --skip-notebooks  # the experiments only: no figures",
    "mfd reproduce --jobs 1  # every step in turn, on all of the machine's threads",
))


def main(argv=None) -> None:
    return CLI.main(argv, _run)


def _run(config: ReproduceConfig, opts) -> None:
    jobs = config.jobs or default_jobs()
    os.chdir(ROOT)
    (ROOT / "results").mkdir(exist_ok=True)
    run = _Run(jobs, config.skip_notebooks, opts.quiet, config.part)
    run.steps()
    if not config.skip_notebooks:
        for nb in PART_NOTEBOOKS[config.part]:
            print(f"\n=== notebook {nb}", flush=True)
            t0 = time.perf_counter()
            run_notebook(ROOT / nb)
            run.seconds[nb] = time.perf_counter() - t0
            print(f"--- {nb}: {run.seconds[nb]:.1f} s", flush=True)
            run.record()
    print("\n=== report (results/ into the records, then the result blocks of docs/ and the figures from them)",
          flush=True)
    from mfd_theory.commands.report import main as report

    try:
        report(["--record", "results"])
    except ValueError as exc:  # a file over the cap, or a run from a dirty tree: nothing recorded
        print(f"{exc}\nthe pages and figures are redrawn from the committed records instead "
              "(mfd report --results results --file PAGE --out OTHER shows this run's numbers)", flush=True)
        report([])
    print(f"\nreproduce finished in {time.perf_counter() - run.t_all:.0f} s; results/ and paper_figs/ are up to date")


class _Run:
    """One ``mfd reproduce``: the lanes of :func:`plan`, each step's seconds recorded in
    ``results/reproduce_times.json`` as soon as it ends (an interrupted run keeps what it measured)."""

    def __init__(self, jobs: int, skip_notebooks: bool, quiet: bool, part: str = "main"):
        self.jobs, self.skip_notebooks, self.quiet, self.part = jobs, skip_notebooks, quiet, part
        self.t_all = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.lanes = plan(jobs, part)
        self.cpus = lane_cpus(jobs)
        self.pending: dict[tuple[str, str], object] = {}
        self.pool = None

    def record(self) -> None:
        from mfd_theory.results import Result

        name = "reproduce_times" if self.part == "main" else f"reproduce_{self.part}_times"
        Result(name, {"part": self.part, "skip_notebooks": self.skip_notebooks, "cpu_count": os.cpu_count(),
                                   "jobs": self.jobs, "lanes": [[f"{w} {lab}" for lab, _, _, w in lane]
                                                                 for lane in self.lanes]},
               {"seconds": self.seconds, "total_s": time.perf_counter() - self.t_all}).save(
            ROOT / "results" / f"{name}.json")

    def steps(self) -> None:
        """Lane 1 started in its pinned worker, lane 0 run here; a timed step waits until lane 1 is
        done and runs alone on every core."""
        affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        if len(self.lanes) > 1:
            self._start_lane1()
        try:
            for label, module, step, what in self.lanes[0]:
                for key in [k for k, f in self.pending.items() if f.done()]:
                    self._collect(key)  # a failed lane-1 step stops the run now, not when it is needed
                if what == "run" and label in TIMED and self.pool is not None:
                    self._wait_for_lane1(label, affinity)
                name = f"prepare {label}" if what == "prepare" else label
                print(f"\n=== {name} ({module})", flush=True)
                self.seconds[name] = _run_step(module, step_argv(label, step, what, self.jobs, self.quiet))
                print(f"--- {name}: {self.seconds[name]:.1f} s", flush=True)
                self.record()
            for key in list(self.pending):
                print(f"\n... waiting for lane 1: {key[1]} {key[0]}", flush=True)
                self._collect(key)
        except BaseException:
            if self.pool is not None:  # stop lane 1 too (ProcessPoolExecutor has no public way to end a running job)
                self.pool.shutdown(wait=False, cancel_futures=True)
                for proc in list((getattr(self.pool, "_processes", None) or {}).values()):
                    proc.terminate()
                self.pool = None
            raise
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)
            if affinity is not None:
                os.sched_setaffinity(0, affinity)  # the notebooks' kernels get every core again

    def _start_lane1(self) -> None:
        import concurrent.futures
        import multiprocessing

        log = ROOT / "results" / "reproduce_lane1.log"
        log.write_text("")
        self.pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_lane_init,
            initargs=(self.cpus[1], str(log)))
        for label, module, step, what in self.lanes[1]:
            self.pending[(label, what)] = concurrent.futures.Future()
        _chain(self.pool, [(module, step_argv(label, step, what, self.jobs, self.quiet), self.pending[(label, what)])
                           for label, module, step, what in self.lanes[1]])
        where = f"core {self.cpus[1]}" if self.cpus[1] is not None else "not pinned"
        print(f"lane 1 ({where}): {', '.join(f'{w} {lab}' for lab, _, _, w in self.lanes[1])}; "
              f"its output goes to {log.relative_to(ROOT)}", flush=True)
        if self.cpus[0] is not None:
            os.sched_setaffinity(0, {self.cpus[0]})

    def _wait_for_lane1(self, label: str, affinity) -> None:
        if self.pending:
            print(f"\n... {label} times its decoding: waiting for lane 1 to finish", flush=True)
        for key in list(self.pending):
            self._collect(key)
        self.pool.shutdown(wait=True)  # no lane-1 process lingers beside the timed steps
        self.pool = None
        if affinity is not None:  # alone now: the timed steps run where the scheduler puts them
            os.sched_setaffinity(0, affinity)

    def _collect(self, key) -> None:
        fut = self.pending.pop(key, None)
        if fut is not None:
            label = f"{key[1]} {key[0]}" if key[1] == "prepare" else key[0]
            self.seconds[f"lane 1: {label}"] = fut.result()  # re-raises the step's error here
            print(f"--- lane 1: {label}: {self.seconds[f'lane 1: {label}']:.1f} s", flush=True)
            self.record()
