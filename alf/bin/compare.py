r"""Compare two settings of a config, each trained over seeds (a regression
check).

By default side A trains in one process and side B with N DDP processes:

    python -m alf.bin.compare --gin_file ppo_cart_pole.gin --num_processes 2 \
        --seeds 3 --root_dir DIR [--gin_param ...] [--parallel]

Any two settings: gin bindings and a process count for each side, e.g.

    python -m alf.bin.compare --gin_file ppo_cart_pole.gin --seeds 3 \
        --root_dir DIR --a_param 'TrainerConfig.unroll_mode="sync"' \
        --b_param 'TrainerConfig.unroll_mode="async"' \
        [--a_name sync --b_name async] [--a_processes N] [--b_processes N]

Trains (or reuses, when finished) DIR/<A>/seed{s} and DIR/<B>/seed{s} with
alf.bin.train, where <A> and <B> are the sides' names (by default single and
ddp{N}, or a and b when --a_param or --b_param is given), then writes
DIR/compare.csv and DIR/compare.png and prints a verdict with side A as the
reference: the difference of the means against the tolerance decides, Welch's
t-test whether the seeds pin it down (`alf.bin.curves.verdict`). Exit codes:
0 the sides agree, 3 they disagree, 4 inconclusive (more seeds needed), 1 an
error (a failed run is named with its log, DIR/<side>/seed{s}.log), 130
interrupted.

DIR/<side>/side.json records what the side's runs train with (the gin
files, every --gin_param, the side's bindings and process count): a rerun
that differs is refused (use a new DIR); one that only adds seeds or judges
the runs another way (--metric, --held_out, tolerances) reuses them.

The sides are compared on ``average_return`` in each run's eval.csv unless
``--metric`` names another of its columns (MetaDrive's ``route_completion``,
``success_rate``...; then ``--tol_abs`` in that metric's units is
required); ``--held_out`` compares the held-out evaluations
(eval_held_out.csv) instead. Those results go to
DIR/compare[-<metric>][-held_out].csv and .png.
"""
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from absl import app, flags

from alf.bin import cli
from alf.bin.curves import (AGREE, DEFAULT_METRIC, DISAGREE, EVAL_CSV,
                            HELD_OUT_CSV, INCONCLUSIVE, Run, align,
                            final_value, normalized_auc, plot, read_curves,
                            verdict, write_compare_csv)
from alf.bin.train import check_root_dir
from alf.config import find_gin_file
from alf.utils.errors import AlfError, one_line


def define_flags() -> None:
    """The CLI's flags: defined when run as a program, not on import, so
    that scripts (benchmarks/runs.py) can import this module beside
    another alf CLI (each defines ``--root_dir``)."""
    flags.DEFINE_string("root_dir", None, "Folder for the runs and the results.")
    flags.DEFINE_multi_string("gin_file", None, "Gin file(s), as for train.py.")
    flags.DEFINE_multi_string("gin_param", None, "Gin binding(s) for every run.")
    flags.DEFINE_multi_string("a_param", None, "Gin binding(s) for side A's runs "
                              "only, applied after --gin_param.")
    flags.DEFINE_multi_string("b_param", None, "Gin binding(s) for side B's runs "
                              "only, applied after --gin_param.")
    flags.DEFINE_string("a_name", None, "Side A's name: its folder under "
                        "--root_dir and its label. Default: 'a' with --a_param or "
                        "--b_param, else 'single' (ddp{N} for N processes).")
    flags.DEFINE_string("b_name", None, "Side B's name: its folder under "
                        "--root_dir and its label. Default: 'b' with --a_param or "
                        "--b_param, else ddp{N} ('single' for 1 process).")
    flags.DEFINE_integer("a_processes", None, "Processes per run of side A (N > 1:"
                         " --distributed multi-process --num_processes N). "
                         "Default 1.", lower_bound=1)
    flags.DEFINE_integer("b_processes", None, "Processes per run of side B. "
                         "Default: --num_processes, or 1 with --a_param or "
                         "--b_param.", lower_bound=1)
    flags.DEFINE_integer("num_processes", 2, "Side B's DDP world size in the "
                         "default 1-vs-N form (not with --a_param, --b_param or "
                         "--b_processes).", lower_bound=2)
    flags.DEFINE_integer("seeds", 3, "Seeds 0..seeds-1 per side.", lower_bound=1)
    flags.DEFINE_bool("parallel", False, "Run 2 trainings at a time.")
    flags.DEFINE_float("tol_rel", 0.1, "Tolerance, relative to side A's mean.")
    flags.DEFINE_float("tol_abs", None, "Tolerance, absolute, in the "
                       "metric's units. Default: 25 for average_return; "
                       "required for any other --metric.")
    flags.DEFINE_string("metric", DEFAULT_METRIC, "The eval.csv column the "
                        "sides are compared on, e.g. route_completion.")
    flags.DEFINE_bool("held_out", False, "Compare the held-out evaluations "
                      "(eval_held_out.csv, TrainerConfig.held_out_env_load_fn)"
                      " instead of eval.csv.")


FLAGS = flags.FLAGS
PROG = "alf.bin.compare"

EXIT_AGREE, EXIT_ERROR, EXIT_DISAGREE, EXIT_INTERRUPTED = 0, 1, 3, 130
# Neither agreement nor a difference is shown: a script must not read it
# as either (nor as an error: the runs are fine, more seeds decide).
EXIT_INCONCLUSIVE = 4
EXIT_CODES = {AGREE: EXIT_AGREE, DISAGREE: EXIT_DISAGREE,
              INCONCLUSIVE: EXIT_INCONCLUSIVE}
DEFAULT_TOL_ABS = 25.0
# A side's name is a folder under --root_dir and a field of compare.csv.
_NAME = re.compile(r"[A-Za-z0-9_+=-][A-Za-z0-9_.+=-]*")


@dataclasses.dataclass(frozen=True)
class Side:
    """One of the two settings compared.

    Attributes:
        name: the folder under the root (``<name>/seed<s>``) and the label.
        processes: 1: each run trains in one process; N > 1: with
            ``--distributed multi-process --num_processes N``.
        params: gin bindings for this side only.
    """
    name: str
    processes: int = 1
    params: Tuple[str, ...] = ()

    def distributed_args(self) -> List[str]:
        """``alf.bin.train``'s flags for ``processes``."""
        if self.processes == 1:
            return []  # train.py's default, --distributed none
        return ["--distributed", "multi-process", "--num_processes",
                str(self.processes)]

    def describe(self) -> str:
        """One line: the process count and the bindings."""
        n = self.processes
        return "; ".join([f"{n} process{'es' if n > 1 else ''}",
                          *self.params])


def make_sides(a_params: Sequence[str] = (), b_params: Sequence[str] = (),
               a_name: Optional[str] = None, b_name: Optional[str] = None,
               a_processes: Optional[int] = None,
               b_processes: Optional[int] = None,
               num_processes: Optional[int] = None) -> Tuple[Side, Side]:
    """Sides A and B from the flags' values (None: the flag was not given).

    Without ``a_params`` and ``b_params`` it is the 1-vs-N check: A has 1
    process, B ``num_processes`` (2 if None), named 'single' and 'ddp{N}'.
    With them, both sides default to 1 process and the names 'a' and 'b'.

    Raises:
        AlfError: for a name that cannot be a folder, equal names, or
            ``num_processes`` given with the two-settings form.
    """
    two_settings = bool(a_params or b_params)
    given_b_processes = b_processes  # what the user passed, for the errors
    if num_processes is not None and (two_settings or b_processes is not None):
        # Which side would it set, and is the other one 1? Refuse to guess.
        raise AlfError("--num_processes sets side B of the default 1-vs-N "
                       "form; with --a_param, --b_param or --b_processes, use "
                       "--a_processes and --b_processes instead")
    if a_processes is None:
        a_processes = 1
    if b_processes is None:
        b_processes = 1 if two_settings else (num_processes or 2)

    def default_name(letter: str, processes: int) -> str:
        if two_settings:
            return letter
        return "single" if processes == 1 else f"ddp{processes}"

    a = Side(default_name("a", a_processes) if a_name is None else a_name,
             a_processes, tuple(a_params))
    b = Side(default_name("b", b_processes) if b_name is None else b_name,
             b_processes, tuple(b_params))
    for flag, side in (("--a_name", a), ("--b_name", b)):
        if not _NAME.fullmatch(side.name):
            raise AlfError(f"{flag} {side.name!r} cannot name a folder and a "
                           "compare.csv field: use letters, digits and "
                           "_ + = - . (no '/', not starting with '.')")
    if a.name == b.name:
        raise AlfError(_same_names(a, a_name, b_name, a_processes,
                                   given_b_processes, num_processes))
    return a, b


def _same_names(a: Side, a_name: Optional[str], b_name: Optional[str],
                a_processes: int, b_processes: Optional[int],
                num_processes: Optional[int]) -> str:
    """Why both sides got ``a.name``, in terms of the flags the user
    passed (a default name is no flag of theirs), and what to pass."""
    if a_name is not None and b_name is not None:
        return (f"--a_name and --b_name are both {a.name!r}; the sides need "
                "different names (each is a folder under --root_dir)")
    if a_name is not None or b_name is not None:
        given, other = (("--a_name", "--b_name") if a_name is not None
                        else ("--b_name", "--a_name"))
        return (f"{given} {a.name!r} is the other side's default name too; "
                f"pass {other} as well, with another name")
    # Default names clash only in the 1-vs-N form, with equal counts.
    n = a_processes
    count = f"{n} process{'es' if n > 1 else ''}"
    if b_processes is not None or num_processes is not None:
        flag = ("--b_processes" if b_processes is not None
                else "--num_processes")
        why = f"--a_processes {n} and {flag} {n} give both sides {count}"
    else:
        why = f"--a_processes {n} gives side A side B's default {count}"
    return (f"{why} and neither has bindings, so both would be named "
            f"{a.name!r}: set --b_processes to another count, or "
            "--a_param/--b_param to compare settings (or "
            "--a_name and --b_name to run the same setting twice)")


# A binding of the seed, which each run's own seed would override.
_SEED_BINDING = re.compile(r"\s*TrainerConfig\.seed\s*=")


def check_sides(gin_files: Sequence[str], gin_params: Sequence[str],
                sides: Sequence[Side], held_out: bool = False,
                metric: Optional[str] = None) -> Dict[str, int]:
    """Checks each side's config as ``alf.bin.train`` and its trainer
    would, before anything runs: otherwise a side that cannot start fails
    only after every run before it has trained. It is parsed, its sizes
    must divide among its processes, and its algorithm is built (see
    `check_algorithm`), which is where an algorithm checks its own
    arguments (a learning rate of 0, say). With ``held_out`` (compare the
    held-out evaluations), it must set ``held_out_env_load_fn``; a
    ``metric`` must be one its evaluations on the training environments
    write (an environment's metric is what its episodes report;
    ``offset_D``, calibration's).

    Returns:
        Side name -> the env steps its runs train for.

    Raises:
        AlfError: naming the side and the problem.
    """
    from alf.utils.process import import_torch
    import_torch()  # a Ctrl-C in torch's import would be lost
    from alf.trainers import TrainerConfig, parse_config
    from alf.trainers.evaluator import EVAL_CSV_COLUMNS
    given = [("--gin_param", p) for p in gin_params] + [
        (f"--{flag}_param", p) for flag, side in zip("ab", sides)
        for p in side.params]
    for flag, param in given:
        if _SEED_BINDING.match(param):
            raise AlfError(f"{flag} {param}: compare sets each run's "
                           "TrainerConfig.seed (0 to --seeds - 1); drop it")
    steps = {}
    for side in sides:
        try:
            parse_config(gin_files, [*gin_params, *side.params])
            config = TrainerConfig()
            config.resolve_device("gloo" if side.processes > 1 else "none")
            if held_out and config.held_out_env_load_fn is None:
                raise AlfError("--held_out compares eval_held_out.csv, which "
                               "a run writes only with "
                               "TrainerConfig.held_out_env_load_fn set")
            metrics = check_algorithm(config.per_rank(side.processes))
            columns = sorted({*EVAL_CSV_COLUMNS, *metrics} - {"env_steps"})
            # (The held-out environments' metrics are their own.)
            if metric is not None and not held_out and not (
                    metric in columns or metric.startswith("offset_")):
                raise AlfError(f"--metric {metric!r} is not what its "
                               f"evaluations write; valid: {columns}")
        except AlfError as e:
            raise AlfError(f"side {side.name} ({side.describe()}): "
                           f"{one_line(e)}") from e
        steps[side.name] = config.num_env_steps
    return steps


def check_algorithm(config) -> Tuple[str, ...]:
    """Builds ``config``'s algorithm (a rank's `TrainerConfig`) as the
    trainer does (left on the CPU), for the checks its constructor and the trainer
    make. Its constructor needs the spaces, so one environment is built
    (and closed) to read them: the cheapest way to reach those checks.
    Returns the metrics its episodes report (columns of ``eval.csv``).

    Raises:
        AlfError: what the environment, the algorithm or the trainer's
            check refuses.
    """
    from alf.environments.batched import check_environment
    from alf.trainers.calibration import check_algorithm as check_calibration
    env = check_environment(
        config.env_load_fn(config.env_name, num_envs=1, seed=None,
                           asynchronous=False), config.env_load_fn)
    try:
        spaces = env.observation_space, env.action_space
        metrics = tuple(env.episode_info)
    finally:
        env.close()
    algorithm = config.algorithm_ctor(observation_space=spaces[0],
                                      action_space=spaces[1], config=config)
    check_calibration(config, algorithm)
    return metrics


def refuse_a_training_run(root: str) -> None:
    """Raises AlfError if ``root`` is an alf.bin.train run's folder: the
    comparison's runs and results would be written among its files."""
    found = [n for n in ("config.gin", "ckpt", "eval.csv")
             if os.path.exists(os.path.join(root, n))]
    if found:
        raise AlfError(f"--root_dir {root} is a training run's folder (it "
                       f"has {', '.join(found)}); a comparison writes its "
                       "runs and results into its own: choose another "
                       "folder")


def finished(run_dir: str, num_env_steps: int) -> bool:
    """Whether the run in ``run_dir`` has a checkpoint at or past
    ``num_env_steps`` and its evaluation: what alf.bin.train would resume
    only to say that the run already finished. (Without that evaluation,
    stopped or killed, it evaluates the checkpoint.)"""
    from alf.trainers.checkpointer import Checkpointer  # imports torch
    from alf.trainers.evaluator import EVAL_CSV, read_eval_csv
    saved = Checkpointer(os.path.join(run_dir, "ckpt")).saved()
    if not saved or max(saved) < num_env_steps:
        return False
    path = os.path.join(run_dir, EVAL_CSV)
    return (os.path.exists(path) and
            max(saved) in read_eval_csv(path)["env_steps"])


# What a side's runs were trained with, as side.json records it: its keys
# and how an error names them. Metrics and tolerances are not in it: they
# judge the same runs. Records from before the gin files and params were
# added lack them and are checked on the rest.
_RECORDED = {"processes": "processes per run", "params": "the side's bindings",
             "gin_files": "--gin_file", "gin_params": "--gin_param"}
_OLDER_RECORDS_LACK = ("gin_files", "gin_params")


def claim_folder(root: str, side: Side, gin_files: Sequence[str] = (),
                 gin_params: Sequence[str] = ()) -> None:
    """Records what ``side``'s runs train with (its process count and
    bindings, the gin files and the common bindings) in
    ``root/<name>/side.json`` or, if a record is there, checks it.

    train.py resumes whatever run it finds in a folder, so without this a
    rerun with another config, or that gives a name other settings (the
    default names 'a' and 'b' with new --a_param values, say), would
    compare the old runs. Folders from before the record existed are
    adopted.

    Args:
        root: the root folder.
        side: the side.
        gin_files: the gin files, resolved (`alf.config.find_gin_file`), so
            that another spelling of the same file is the same.
        gin_params: the bindings for every run.

    Raises:
        AlfError: naming the folder whose runs have other settings and what
            differs.
    """
    path = os.path.join(root, side.name, "side.json")
    want = {"processes": side.processes, "params": list(side.params),
            "gin_files": list(gin_files), "gin_params": list(gin_params)}
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(json.dumps(want) + "\n")
        return
    with open(path) as f:
        text = f.read()
    try:
        had = json.loads(text)
    except ValueError:
        had = None
    folder = os.path.dirname(path)
    if not isinstance(had, dict):  # damaged: nothing vouches for the runs
        raise AlfError(f"{path} cannot be read ({' '.join(text.split())}), "
                       f"so the settings of the runs in {folder} are unknown;"
                       " use a new --root_dir")
    differ = [f"{label}: {had.get(key)} then, {want[key]} now"
              for key, label in _RECORDED.items()
              if had.get(key) != want[key]
              and (key in had or key not in _OLDER_RECORDS_LACK)]
    if differ:
        raise AlfError(f"{folder} holds runs of other settings "
                       f"({'; '.join(differ)}); use a new --root_dir, or the "
                       "settings those runs were trained with")


def _start(cmd: List[str], log_path: str) -> subprocess.Popen:
    from alf.utils.process import die_with_parent  # no run outlives this tool
    env = {k: v for k, v in os.environ.items()  # else train.py joins torchrun
           if k not in ("RANK", "WORLD_SIZE")}
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a") as log:  # append: a rerun keeps the first log
        print("===", *cmd, file=log, flush=True)
        # Own session: a terminal Ctrl-C reaches only this tool, which passes
        # one SIGINT on (a second one would skip train.py's clean stop).
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True,
                                preexec_fn=die_with_parent)


def run_all(jobs: Dict[Run, List[str]], root: str, parallel: int,
            on_start: Callable[[Run], None] = lambda run: None,
            done: Callable[[Run], bool] = lambda run: False,
            check: Callable[[Run], None] = lambda run: None) -> None:
    """Runs the commands, ``parallel`` at a time, logging to
    ``root/<side>/seed<s>.log``; ``on_start(run)`` is called before a run
    starts. Runs for which ``done(run)`` holds are reused, not started.
    ``check(run)`` is called on each reused run, then on each run as it
    finishes, so that what it refuses (a misspelt --metric) stops the
    comparison after one run, not after all.

    Raises:
        AlfError: naming the first run that failed and its log, or what
            ``check`` raised (runs still going get SIGINT: train.py saves a
            checkpoint and stops).
    """
    pending = []
    for name, seed in jobs:
        if done((name, seed)):
            print(f"{name}/seed{seed}: reused", flush=True)
            check((name, seed))
        else:
            pending.append((name, seed))
    # Popen -> (run, log, offset, start)
    running: Dict[subprocess.Popen, Tuple[Run, str, int, float]] = {}
    try:
        while pending or running:
            while pending and len(running) < parallel:
                name, seed = run = pending.pop(0)
                on_start(run)
                log = os.path.join(root, name, f"seed{seed}.log")
                offset = os.path.getsize(log) if os.path.exists(log) else 0
                running[_start(jobs[run], log)] = run, log, offset, time.time()
            time.sleep(0.2)
            for proc in [p for p in running if p.poll() is not None]:
                (name, seed), log, offset, start = running.pop(proc)
                if proc.returncode != 0:
                    with open(log, errors="replace") as f:
                        f.seek(offset)  # this run's output only
                        out = f.read().splitlines()
                    # Quote train.py's one-line error, not trailing noise.
                    said = [x for x in out if x.startswith("alf.bin.train:")]
                    why = f": {said[-1]}" if said else ""
                    raise AlfError(f"run {name}/seed{seed} failed (exit code "
                                   f"{proc.returncode}){why}; log: {log}")
                print(f"{name}/seed{seed}: trained in "
                      f"{time.time() - start:.0f} s", flush=True)
                check((name, seed))
    finally:  # after a failure or Ctrl-C; train.py's launcher escalates
        for proc in running:
            proc.send_signal(signal.SIGINT)
        for proc in running:
            proc.wait()


def same_config_warning(root: str, a: Side, b: Side,
                        seed: int) -> Optional[str]:
    """A warning when both sides' runs of ``seed`` trained the same config
    in as many processes, else None.

    Gin accepts a binding for any registered configurable, called or not
    (``PPOAlgorithm.learning_rate`` under a config that trains PPG): such
    a side trains what the other does, and the verdict would only measure
    seed noise. A run's ``config.gin`` is gin's operative config, the
    bindings its learner used; one read only inside environment workers
    would not show, hence a warning, not an error.
    """
    if a.processes != b.processes:
        return None
    paths = [os.path.join(root, side.name, f"seed{seed}", "config.gin")
             for side in (a, b)]
    try:
        texts = []
        for path in paths:
            with open(path) as f:
                texts.append(f.read())
    except OSError:  # a run from before config.gin: nothing to compare
        return None
    if texts[0] != texts[1]:
        return None
    bindings = "; ".join([*a.params, *b.params]) or "their settings"
    return (f"warning: {paths[0]} and {paths[1]} are the same: sides "
            f"{a.name} and {b.name} trained one config, so {bindings} "
            "changed nothing the learner used (a binding of a configurable "
            "that this config never calls?)")


def tolerance(metric: str, tol_abs: Optional[float]) -> float:
    """``--tol_abs``, or its default for the return; one in the units of
    any other metric must be given (25 return units would pass anything
    on a rate)."""
    if tol_abs is not None:
        return tol_abs
    if metric == DEFAULT_METRIC:
        return DEFAULT_TOL_ABS
    raise AlfError(f"--metric {metric} needs --tol_abs in its own units "
                   f"(e.g. 0.05 for a rate); the default "
                   f"{DEFAULT_TOL_ABS:g} is for {DEFAULT_METRIC}")


def output_name(metric: str, held_out: bool) -> str:
    """The results' file name without extension: ``compare`` for the
    return on eval.csv, else with the metric and ``held_out`` appended, so
    that judging the same runs another way keeps the earlier results."""
    parts = ["compare"]
    if metric != DEFAULT_METRIC:
        parts.append(metric)
    if held_out:
        parts.append("held_out")
    return "-".join(parts)


def _gin_params(params: Sequence[str]) -> List[str]:
    return [a for p in params for a in ("--gin_param", p)]


def train_commands(root: str, gin_files: Sequence[str],
                   gin_params: Sequence[str],
                   sides: Union[int, Sequence[Side]],
                   seeds: int) -> Dict[Run, List[str]]:
    """(side name, seed) -> its ``alf.bin.train`` command, seed by seed.

    Args:
        root: the runs go to ``root/<side name>/seed<s>``.
        gin_files, gin_params: for every run.
        sides: side A and side B, whose bindings follow ``gin_params`` (so
            that they win); an int N stands for the default pair, 1 process
            vs N.
        seeds: seeds 0..seeds-1 per side.
    """
    if isinstance(sides, int):
        sides = make_sides(num_processes=sides)
    args = [a for g in gin_files for a in ("--gin_file", g)]
    args += _gin_params(gin_params)
    return {(side.name, seed): [
        sys.executable, "-m", "alf.bin.train", "--root_dir",
        os.path.join(root, side.name, f"seed{seed}"),
        *side.distributed_args(), *args, *_gin_params(side.params),
        "--gin_param", f"TrainerConfig.seed={seed}"]  # last: none overrides
        for seed in range(seeds) for side in sides}


def main(argv: List[str]) -> int:
    """The absl entry point; returns the process exit code."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    cli.interrupt_on_stop_signals()
    try:
        missing = [f"--{f}" for f in ("root_dir", "gin_file")
                   if not FLAGS[f].value]
        if missing:
            raise AlfError(f"{' and '.join(missing)} "
                           f"{'is' if len(missing) == 1 else 'are'} "
                           "required, e.g. --root_dir runs/compare "
                           "--gin_file ppo_cart_pole.gin")
        for flag in ("tol_abs", "tol_rel"):
            value = FLAGS[flag].value
            if value is not None and not value >= 0:  # NaN as well
                raise AlfError(f"--{flag}={value:g}; it must be 0 or more")
        metric = FLAGS.metric
        tol_abs = tolerance(metric, FLAGS.tol_abs)
        csv_name = HELD_OUT_CSV if FLAGS.held_out else EVAL_CSV
        a, b = sides = make_sides(
            FLAGS.a_param or (), FLAGS.b_param or (), FLAGS.a_name,
            FLAGS.b_name, FLAGS.a_processes, FLAGS.b_processes,
            FLAGS.num_processes if FLAGS["num_processes"].present else None)
        steps = check_sides(FLAGS.gin_file, FLAGS.gin_param or [], sides,
                            FLAGS.held_out, metric)
        gin_files = [find_gin_file(g) for g in FLAGS.gin_file]
        root = check_root_dir(FLAGS.root_dir)
        refuse_a_training_run(root)
        jobs = train_commands(root, FLAGS.gin_file, FLAGS.gin_param or [],
                              sides, FLAGS.seeds)
        parallel = 2 if FLAGS.parallel else 1
        print(f"side A, {a.name}: {a.describe()}",
              f"side B, {b.name}: {b.describe()}",
              f"{len(jobs)} runs, {parallel} at a time; logs in "
              f"{root}/<side>/seed<s>.log", sep="\n", flush=True)
        named = {side.name: side for side in sides}

        def claim(side: Side) -> None:
            claim_folder(root, side, gin_files, FLAGS.gin_param or [])

        for side in sides:  # other settings there: fail before any training
            if os.path.isdir(os.path.join(root, side.name)):
                claim(side)
        read: Dict[Run, Dict[str, list]] = {}

        def check(run: Run) -> None:  # the metric exists: align says if not
            read[run] = read_curves(os.path.join(root, run[0],
                                                 f"seed{run[1]}"),
                                    csv_name, PROG)
            align({run: read[run]}, metric=metric, csv_name=csv_name)
            if run[1] == 0 and all((s.name, 0) in read for s in sides):
                warning = same_config_warning(root, a, b, 0)
                if warning:
                    print(warning, file=sys.stderr, flush=True)

        # A side's folder appears with its first run (none after a failure).
        run_all(jobs, root, parallel,
                on_start=lambda run: claim(named[run[0]]),
                done=lambda run: finished(
                    os.path.join(root, run[0], f"seed{run[1]}"),
                    steps[run[0]]),
                check=check)
        # Side A first: its runs make the grid and lead the table.
        curves = {run: read[run] for run in sorted(
            jobs, key=lambda r: (r[0] != a.name, r[1]))}
        grid, values = align(curves, reference=a.name, metric=metric,
                             csv_name=csv_name)
        config = "+".join(os.path.basename(g) for g in FLAGS.gin_file)
        title = f"{config}, {a.name} vs {b.name}, {FLAGS.seeds} seed(s)"
        if FLAGS.held_out:
            title += ", held out"
        out = output_name(metric, FLAGS.held_out)
        write_compare_csv(os.path.join(root, out + ".csv"), grid, values,
                          metric)
        plot(os.path.join(root, out + ".png"), grid, values, title, metric)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; rerun to resume", file=sys.stderr)
        return cli.exit_code_for_interrupt()
    except (AlfError, OSError) as e:
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        return EXIT_ERROR
    stats: Dict[str, Dict[int, Dict[str, float]]] = {}
    for (name, seed), v in values.items():
        stats.setdefault(name, {})[seed] = {"final": final_value(v),
                                            "auc": normalized_auc(grid, v)}
    label = "return" if metric == DEFAULT_METRIC else metric
    try:
        outcome, lines = verdict(stats, FLAGS.tol_rel, tol_abs, label=label)
    except AlfError as e:  # align refuses non-finite values first
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        return EXIT_ERROR
    print(f"{title}: {len(grid)} evaluation steps, {grid[0]} to {grid[-1]} "
          f"env steps; wrote {root}/{out}.csv and {out}.png", *lines,
          sep="\n", flush=True)
    return EXIT_CODES[outcome]


if __name__ == "__main__":
    define_flags()
    cli.run(lambda argv: sys.exit(main(argv)), __name__)
