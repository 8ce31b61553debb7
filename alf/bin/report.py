r"""A run's evaluation curves as one table: the evaluations on the training
environments and on the held-out ones side by side and, with ``--rollouts``,
what the training episodes scored around each evaluation (TensorBoard's
``rollout/`` summaries: the sampling policy as it collects), so that a
deterministic evaluation can be read beside the policy that was trained.

    python -m alf.bin.report --root_dir RUN \
        [--metrics route_completion,success_rate] [--rollouts] \
        [--calibration] [--window 41000] [--last 3] [--plot FILE.png] \
        [--baseline DIR ...]

Prints a Markdown table (one column per evaluation, one row per split and
metric) and the mean of each row over its last ``--last`` evaluations;
``--plot`` also draws the rows, one panel per metric. ``--baseline DIR``
adds a fixed policy evaluated the same way (a folder with its own eval.csv
and eval_held_out.csv, e.g. those ``benchmarks/metadrive_baselines.py
--out_dir`` writes for random actions and full throttle): its last
evaluation, as a constant row and a dashed line. ``--calibration`` adds,
for a run that calibrates its deterministic offset
(``TrainerConfig.calibrate_offsets``), what every candidate offset scored
on the calibration episodes before each evaluation (calibration.csv; the
chosen one is eval.csv's ``offset_D``). Reads only what the runs
wrote (eval.csv, eval_held_out.csv, train/events*, config.gin and the
config-resumed-S.gin of a resume with other bindings, which label each
range of evaluations with its policy), so it works on a run still
training. Empty cells (no evaluation, or a value that is not a number) are
left out of the last-N means, which say so. Exit codes: 0, or 1 with a
one-line error.
"""
import ast
import csv
import glob
import math
import os
import re
import sys
from typing import (Callable, Dict, List, NamedTuple, Optional, Sequence,
                    Set, Tuple)

import numpy as np
from absl import app, flags

from alf.bin import cli
from alf.bin.curves import (CALIBRATION_CSV, EVAL_CSV, HELD_OUT_CSV,
                            read_curves, warn_skipped)
from alf.utils.errors import AlfError, one_line

PROG = "alf.bin.report"
ROLLOUT_PREFIX = "rollout/"
# Rollout summaries are means over the episodes that ended since the last
# summary; this one counts them, so that a window's mean weighs each episode
# once.
EPISODES_TAG = ROLLOUT_PREFIX + "episodes"


class Row(NamedTuple):
    """One row of the report."""
    split: str  # which evaluation: "training (deterministic)", ...
    metric: str
    values: List[float]  # one per evaluation step (NaN: none there)
    baseline: bool = False  # a fixed policy's constant


def define_flags() -> None:
    """The CLI's flags (defined when run as a program, not on import)."""
    flags.DEFINE_string("root_dir", None, "The run's folder.")
    flags.DEFINE_list("metrics", None, "Columns of eval.csv to show (default: "
                      "all of them).")
    flags.DEFINE_bool("rollouts", False, "Also show the training episodes' "
                      "rollout/ summaries around each evaluation.")
    flags.DEFINE_bool("calibration", False, "Also show what each candidate "
                      "deterministic offset scored before each evaluation "
                      "(a run with TrainerConfig.calibrate_offsets).")
    flags.DEFINE_integer("window", None, "Rollout summaries within this many "
                         "env steps of an evaluation count for it (default: "
                         "half the median spacing of the evaluations).")
    flags.DEFINE_integer("last", 3, "Summarise each row over its last N "
                         "evaluations.")
    flags.DEFINE_string("plot", None, "Also draw the rows into this file "
                        "(.png, .pdf, .svg, ...).")
    flags.DEFINE_multi_string("baseline", None, "A fixed policy's folder "
                              "(eval.csv, eval_held_out.csv) to show as "
                              "constant rows; repeatable.")


def _binding(config: str, name: str, whole_line: bool = False
             ) -> Optional[str]:
    """The value ``name`` is bound to in the saved config file ``config``
    (a run's config.gin or config-resumed-S.gin), as written (None when
    the file or the binding is missing): its first word, or with
    ``whole_line`` the rest of the line (a tuple's spaces). A macro
    (``%FRAC``) is read as the value it stands for: gin's operative
    config lists the macros' own lines, ``FRAC = 0.5``, first."""
    if not os.path.isfile(config):
        return None
    with open(config, errors="replace") as f:  # a damaged byte: no match
        text = f.read()
    value = r"(.*?)\s*$" if whole_line else r"(\S+)"
    seen = set()
    while name not in seen:  # (a loop of macros gin would refuse)
        seen.add(name)
        m = re.search(rf"^{re.escape(name)}\s*=\s*{value}", text, re.M)
        if m is None or not m.group(1).startswith("%"):
            return None if m is None else m.group(1)
        name = m.group(1)[1:]
    return None


def _not_a_folder(path: str) -> str:
    return ("a file, not a run's folder" if os.path.exists(path) else
            "no such folder")


def run_configs(run_dir: str) -> List[Tuple[int, str]]:
    """The run's saved configs, ``(S, path)`` by S: config.gin at 0, then
    each ``config-resumed-S.gin`` (a resume at S with other bindings;
    `alf.trainers.run_state.resumed_configs`). A step's evaluation used
    the last one with S below it, as ``alf.bin.play`` rebuilds a
    checkpoint (the evaluation at S itself came before the resume, unless
    the resume made it up: a run stopped during it, resumed with other
    bindings, is labelled as evaluated with the config before S)."""
    from alf.trainers.run_state import resumed_configs
    return [(0, os.path.join(run_dir, "config.gin")),
            *(resumed_configs(run_dir) if os.path.isdir(run_dir) else ())]


def _by_steps(run_dir: str, steps: Sequence[int],
              label: Callable[[str], Optional[str]]) -> Optional[str]:
    """``label(config)`` for the configs the evaluations at ``steps``
    used: one label when they all say the same, else each with the range
    it held for, ``"deterministic until 10240; sampling after"`` (None
    when no config says)."""
    configs = run_configs(run_dir)
    # (label, the config's start) per run of evaluations with one label.
    spans: List[Tuple[Optional[str], int]] = []
    for s in steps:
        start, config = [(start, path) for start, path in configs
                         if start < s or start == 0][-1]
        said = label(config)
        if not spans or spans[-1][0] != said:
            spans.append((said, start))
    if len(spans) < 2:
        return spans[0][0] if spans else None
    # Each label holds until the resume that brought the next one.
    parts = [f"{said or 'unknown'} until {resumed}"
             for (said, _), (_, resumed) in zip(spans, spans[1:])]
    parts.append(f"{spans[-1][0] or 'unknown'} after")
    return "; ".join(parts)  # a label may hold a comma


def _evaluated_with(config: str) -> Optional[str]:
    value = _binding(config, "TrainerConfig.eval_deterministic")
    if value is None:
        return None
    if value != "True":
        return "sampling"
    calibrated = _binding(config, "TrainerConfig.calibrate_offsets")
    return ("deterministic" if calibrated in (None, "None")
            else "deterministic, calibrated")


def evaluation_policy(run_dir: str, steps: Sequence[int] = (0, )
                      ) -> Optional[str]:
    """How the run evaluated at ``steps``: ``"deterministic"``
    (``"deterministic, calibrated"`` where each evaluation chose its
    offset: ``TrainerConfig.calibrate_offsets``) or ``"sampling"``, from
    the config each step's evaluation used (`run_configs`); a run resumed
    with another policy gets each with its range (`_by_steps`). None when
    the configs do not say."""
    return _by_steps(run_dir, steps, _evaluated_with)


def _acted_with(config: str) -> Optional[str]:
    if not os.path.isfile(config):
        return None
    value = _binding(config, "PPOAlgorithm.explore_fraction")
    fraction = 1.0 if value is None else float(value)
    schedule = _binding(config, "PPOAlgorithm.explore_fraction_schedule",
                        whole_line=True)
    if schedule is not None and schedule != "None":
        start, end, final = ast.literal_eval(schedule)
        return (f"sampling {fraction:.0%} to {final:.0%} of steps over "
                f"{start:.0%}-{end:.0%} of training")
    if fraction >= 1.0:
        return "sampling"
    return f"sampling {fraction:.0%} of steps"


def behaviour_policy(run_dir: str, steps: Sequence[int] = (0, )) -> str:
    """How the run's rollouts acted around ``steps``: ``"sampling"``, or
    with ``PPOAlgorithm.explore_fraction`` below 1 the share of steps that
    sampled (the rest acted with the mode), moving from one share to
    another over training under ``PPOAlgorithm.explore_fraction_schedule``;
    per range where a resume changed it (`_by_steps`)."""
    return _by_steps(run_dir, steps, _acted_with) or "sampling"


def read_rollouts(run_dir: str) -> Dict[str, List[Tuple[int, float]]]:
    """``rollout/`` scalar name (without the prefix) -> [(env steps,
    value)], from every event file under ``run_dir/train`` (a resumed run
    writes one more; a step written twice keeps the later file's value).

    Raises:
        AlfError: if the run has no training event file.
    """
    files = sorted(glob.glob(os.path.join(run_dir, "train", "events*")),
                   key=os.path.getmtime)
    if not files:
        raise AlfError(f"{run_dir}/train has no TensorBoard event file "
                       "(--rollouts reads the training summaries)")
    from tensorboard.backend.event_processing.event_accumulator import \
        EventAccumulator
    series: Dict[str, Dict[int, float]] = {}
    for path in files:
        events = EventAccumulator(path, size_guidance={"scalars": 0})
        events.Reload()
        for tag in events.Tags()["scalars"]:
            if tag.startswith(ROLLOUT_PREFIX):
                series.setdefault(tag[len(ROLLOUT_PREFIX):], {}).update(
                    (e.step, e.value) for e in events.Scalars(tag))
    return {name: sorted(values.items()) for name, values in series.items()}


def window_means(series: Sequence[Tuple[int, float]], steps: Sequence[int],
                 window: int,
                 weights: Optional[Dict[int, float]] = None) -> List[float]:
    """For each of ``steps``, the mean of the ``series`` values written
    within ``window`` env steps of it (NaN where none was), each weighted
    by ``weights[step]`` (the episodes it averaged; 1 when absent)."""
    out = []
    for s in steps:
        near = [(v, (weights or {}).get(t, 1.0)) for t, v in series
                if abs(t - s) <= window]
        total = sum(w for _, w in near)
        out.append(sum(v * w for v, w in near) / total if total > 0
                   else math.nan)
    return out


def default_window(steps: Sequence[int]) -> int:
    """Half the median spacing of the evaluations (so that windows do not
    overlap), or 0 for a single evaluation."""
    if len(steps) < 2:
        return 0
    return int(np.median(np.diff(steps)) // 2)


def baseline_rows(base_dir: str, metrics: Sequence[str], width: int
                  ) -> List[Row]:
    """A fixed policy's rows: the last evaluation in ``base_dir``'s
    eval.csv (and eval_held_out.csv, if there), for each of ``metrics``,
    repeated ``width`` times.

    Raises:
        AlfError: a missing folder or file, or a metric it lacks.
    """
    if not os.path.isdir(base_dir):
        raise AlfError(f"--baseline={base_dir}: {_not_a_folder(base_dir)}")
    name = os.path.basename(os.path.normpath(base_dir))
    rows = []
    for csv_name, split in ((EVAL_CSV, "training"),
                            (HELD_OUT_CSV, "held out")):
        if csv_name == HELD_OUT_CSV and not os.path.isfile(
                os.path.join(base_dir, csv_name)):
            continue
        curves = _finite(read_curves(base_dir, csv_name, PROG))
        warn_not_numbers(base_dir, csv_name, curves)
        for m in metrics:
            if not curves.get(m):
                raise AlfError(f"--baseline={base_dir}: {csv_name} has no "
                               f"{m!r} value")
            rows.append(Row(f"{name}, {split}", m, [curves[m][-1]] * width,
                            baseline=True))
    return rows


def calibration_rows(run_dir: str, metrics: Sequence[str],
                     steps: Sequence[int]) -> List[Row]:
    """For each of ``metrics`` (but the ``offset_D`` columns), one row per
    candidate offset: what it scored on the calibration episodes before
    each of ``steps``' evaluations (NaN where it was not played), from
    calibration.csv.

    Raises:
        AlfError: the run wrote no calibration.csv, or the file lacks a
            metric.
    """
    path = os.path.join(run_dir, CALIBRATION_CSV)
    if not os.path.isfile(path):
        raise AlfError(f"--calibration: {path} does not exist (the run "
                       "did not set TrainerConfig.calibrate_offsets)")
    from alf.trainers.evaluator import read_csv_rows
    skipped: List[str] = []
    played = read_csv_rows(path, skipped)  # a crash may cut the last row
    warn_skipped(PROG, path, skipped)
    columns = sorted((c for c in (played[0] if played else ())
                      if c.startswith("offset_")),
                     key=lambda c: int(c[len("offset_"):]))
    # A candidate's own offset is no score.
    metrics = [m for m in metrics if not m.startswith("offset_")]
    for m in metrics:
        if played and m not in played[0]:
            raise AlfError(f"--calibration: {path} has no {m!r} column")
    scores: Dict[Tuple[float, ...], Dict[str, Dict[int, float]]] = {}
    for r in played:
        # NaN where a column came after the row (a resumed run that
        # calibrates more dimensions widens the file).
        offsets = tuple(r[c] for c in columns)
        for m in metrics:
            # A step calibrated twice (a resumed run) keeps the later row.
            scores.setdefault(offsets, {}).setdefault(m, {})[
                int(r["env_steps"])] = r[m]
    rows = []
    for m in metrics:
        for offsets in sorted(scores):
            # "none": a dimension not calibrated before a resume added it.
            name = " ".join(f"{c[len('offset_'):]}="
                            f"{'none' if math.isnan(x) else format(x, '+.3g')}"
                            for c, x in zip(columns, offsets))
            by_step = scores[offsets].get(m, {})
            rows.append(Row(f"calibration, offset {name}", m,
                            [by_step.get(s, math.nan) for s in steps]))
    return rows


def report_rows(run_dir: str, metrics: Optional[Sequence[str]] = None,
                rollouts: bool = False, window: Optional[int] = None,
                baselines: Sequence[str] = (), calibration: bool = False
                ) -> Tuple[List[int], List[Row]]:
    """The run's evaluation steps and the rows of its report: for each
    metric, the training environments' evaluation, the held-out one (if
    the run has it), the rollouts' (if asked), the candidate offsets'
    calibration scores (if asked) and the ``baselines``' constants, on
    the training evaluations' steps.

    Raises:
        AlfError: a missing run or eval.csv, a metric that is not one of
            eval.csv's columns, ``rollouts`` on a run without summaries,
            ``calibration`` on a run without calibration.csv, or a
            baseline folder without the metrics.
    """
    if not os.path.isdir(run_dir):
        raise AlfError(f"--root_dir={run_dir}: {_not_a_folder(run_dir)}")
    train = _finite(read_curves(run_dir, EVAL_CSV, PROG))
    warn_not_numbers(run_dir, EVAL_CSV, train)
    steps = [int(s) for s in train["env_steps"]]
    if not steps:
        raise AlfError(f"{run_dir}/{EVAL_CSV} has no evaluation yet")
    valid = [c for c in train if c != "env_steps"]
    # Each once, in the order given: a repeat printed its row twice.
    metrics = list(dict.fromkeys(metrics or valid))
    for m in metrics:
        if m not in valid:
            raise AlfError(f"--metrics: {m!r} is not a column of "
                           f"{run_dir}/{EVAL_CSV}; valid: {valid}")
    held = (_finite(read_curves(run_dir, HELD_OUT_CSV, PROG))
            if os.path.isfile(os.path.join(run_dir, HELD_OUT_CSV)) else None)
    if held is not None:
        warn_not_numbers(run_dir, HELD_OUT_CSV, held)
    summaries = read_rollouts(run_dir) if rollouts else {}
    episodes = dict(summaries.get(EPISODES_TAG[len(ROLLOUT_PREFIX):], []))
    if window is None:
        window = default_window(steps)
    policy = evaluation_policy(run_dir, steps)
    suffix = f" ({policy})" if policy else ""
    behaviour = behaviour_policy(run_dir, steps)
    fixed = [r for b in baselines
             for r in baseline_rows(b, metrics, len(steps))]
    calibrated = (calibration_rows(run_dir, metrics, steps) if calibration
                  else [])
    rows: List[Row] = []
    for m in metrics:
        rows.append(Row("training" + suffix, m, list(train[m])))
        if held is not None:
            by_step = dict(zip((int(s) for s in held["env_steps"]),
                               held.get(m, [])))
            rows.append(Row("held out" + suffix, m,
                            [by_step.get(s, math.nan) for s in steps]))
        if rollouts:
            rows.append(Row(f"rollouts ({behaviour}, ±{window})", m,
                            window_means(summaries.get(m, []), steps,
                                         window, episodes)))
        rows += [r for r in calibrated + fixed if r.metric == m]
    return steps, rows


def last_mean(values: Sequence[float], last: int) -> float:
    """The mean of the last ``last`` values that are not NaN."""
    kept = [v for v in values if not math.isnan(v)][-last:]
    return float(np.mean(kept)) if kept else math.nan


def _averaged(values: Sequence[float], last: int) -> List[int]:
    """The indices of the values `last_mean` averages."""
    return [i for i, v in enumerate(values) if not math.isnan(v)][-last:]


def _finite(curves: Dict[str, list]) -> Dict[str, list]:
    """``curves`` with every infinite value NaN: a diverged evaluation's
    ``inf`` is not a score to show or average, any more than its ``nan``."""
    return {m: [v if math.isfinite(v) else math.nan for v in values]
            for m, values in curves.items()}


def warn_not_numbers(run_dir: str, csv_name: str,
                     curves: Dict[str, list]) -> None:
    """Names, in one line on stderr, the values of a run's evaluation file
    that are not finite numbers (a diverged evaluation writes ``nan`` or
    ``inf``): the table shows them as empty cells, as a step without
    evaluation. Cells left
    empty are not named: alf leaves a metric empty in the rows before a
    resumed run added it (a calibration's ``offset_D``)."""
    written = _written_not_finite(os.path.join(run_dir, csv_name))
    bad = [f"{m} at {s:g}" for m, values in curves.items()
           if m != "env_steps"
           for s, v in zip(curves["env_steps"], values)
           if math.isnan(v) and (m, float(s)) in written]
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        print(f"{PROG}: warning: {os.path.join(run_dir, csv_name)} has "
              f"{len(bad)} value{'s' if len(bad) > 1 else ''} that "
              f"{'are' if len(bad) > 1 else 'is'} not a finite number "
              f"({', '.join(bad[:5])}{more}): empty cells, left out of "
              "the means", file=sys.stderr, flush=True)


def _written_not_finite(path: str) -> Set[Tuple[str, float]]:
    """(column, env steps) of the cells of a CSV file that hold a text
    reading as NaN or infinite (not empty ones)."""
    from alf.trainers.evaluator import CSV_ENCODING
    found: Set[Tuple[str, float]] = set()
    # A damaged byte: its row is left out (read_csv_rows warns of it).
    with open(path, newline="", encoding=CSV_ENCODING,
              errors="replace") as f:
        for row in csv.DictReader(f):
            try:
                step = float(row.get("env_steps") or "")
            except ValueError:
                continue
            for column, text in row.items():
                if column is None or not isinstance(text, str):
                    continue
                try:
                    if text.strip() and not math.isfinite(float(text)):
                        found.add((column, step))
                except ValueError:
                    continue
    return found


def _cell(v: float) -> str:
    if math.isnan(v):
        return ""
    return f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"


def step_labels(steps: Sequence[int]) -> List[str]:
    """The steps as ``82k``; as ``1.5k`` (or, failing that, in full) when
    two would otherwise read the same."""
    for fmt in ("{:.0f}k", "{:.1f}k", None):
        labels = [str(s) if s < 1000 or fmt is None else fmt.format(s / 1000)
                  for s in steps]
        if len(set(labels)) == len(labels):
            break
    return labels


def format_markdown(steps: Sequence[int], rows: Sequence[Row],
                    last: int = 3) -> str:
    """The rows as a Markdown table, steps labelled by `step_labels`, with
    a last column holding each row's mean over its last ``last``
    evaluations. Empty cells (no evaluation at that step, or a value that
    is not a number) are left out of the mean; where that makes it other
    than the mean of the last ``last`` columns, the cell is marked ``†``
    and a note under the table names the steps it averages."""
    labels = step_labels(steps)
    head = ["env steps"] + labels + [f"last {last}"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    notes = []
    for split, metric, values, _ in rows:
        cells = [f"{split}: {metric}"] + [_cell(v) for v in values]
        mean = _cell(last_mean(values, last))
        used = _averaged(values, last)
        if used != list(range(len(values)))[-last:] and mean:
            mean += " †"
            at = ", ".join(labels[i] for i in used)
            notes.append(f"† {split}: {metric}: the mean of "
                         f"{len(used)} value{'s' if len(used) > 1 else ''}"
                         f" (at {at}): empty cells are left out")
        cells.append(mean)
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += [""] + notes
    return "\n".join(lines)


def check_plot_path(path: str) -> None:
    """Refuses a ``--plot`` file that matplotlib cannot write, before the
    report is computed.

    Raises:
        AlfError: naming the extensions it can write, or the folder that
            is missing or not writable.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else (
            "does not exist")
        raise AlfError(f"--plot={path}: directory {folder} {what}")
    if not os.access(folder, os.W_OK):
        raise AlfError(f"--plot={path}: directory {folder} is not writable")
    if os.path.isdir(path):
        raise AlfError(f"--plot={path} is a folder; name a file in it")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise AlfError(f"--plot={path} exists and is not writable")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    known = sorted(FigureCanvasAgg.get_supported_filetypes())
    ext = os.path.splitext(path)[1][1:].lower()
    if ext not in known:
        raise AlfError(f"--plot={path}: matplotlib cannot write "
                       f"{'.' + ext if ext else 'a file without extension'};"
                       f" use one of {', '.join('.' + k for k in known)}")


def plot_rows(path: str, steps: Sequence[int], rows: Sequence[Row],
              title: str) -> None:
    """One panel per metric, one line per split (dashed: baselines)."""
    import matplotlib
    matplotlib.use("Agg")  # no display on servers and in tests
    import matplotlib.pyplot as plt
    metrics = list(dict.fromkeys(r.metric for r in rows))
    fig, axes = plt.subplots(len(metrics), 1, squeeze=False,
                             figsize=(7, 3.2 * len(metrics)), sharex=True)
    for ax, metric in zip(axes[:, 0], metrics):
        for r in rows:
            if r.metric == metric:
                ax.plot(steps, r.values, label=r.split,
                        **({"linestyle": "--"} if r.baseline else
                           {"marker": "."}))
        ax.set(ylabel=metric.replace("_", " "))
        # Outside the panel: the curves fill it.
        ax.legend(fontsize="small", loc="upper left",
                  bbox_to_anchor=(1.01, 1.0))
    axes[0, 0].set_title(title)
    axes[-1, 0].set_xlabel("env steps")
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def _say(text: str) -> None:
    """Prints ``text`` now; a reader that stopped early (``report | head``)
    is no error, and the plot is still written."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python's own flush of stdout at exit would fail again, and say so.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: List[str]) -> int:
    """The absl entry point; returns the process exit code."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    FLAGS = flags.FLAGS
    try:
        if FLAGS.last < 1:
            raise AlfError(f"--last={FLAGS.last}; it must be at least 1")
        if FLAGS.window is not None and FLAGS.window < 0:
            raise AlfError(f"--window={FLAGS.window}; it must be 0 or more "
                           "env steps")
        plot = FLAGS.plot and os.path.expanduser(FLAGS.plot)
        if plot:
            check_plot_path(plot)
        run_dir = os.path.abspath(os.path.expanduser(FLAGS.root_dir))
        steps, rows = report_rows(run_dir, FLAGS.metrics, FLAGS.rollouts,
                                  FLAGS.window, [
                                      os.path.expanduser(b)
                                      for b in FLAGS.baseline or ()],
                                  FLAGS.calibration)
        _say(format_markdown(steps, rows, FLAGS.last))
        if plot:
            plot_rows(plot, steps, rows, os.path.basename(run_dir))
            _say(f"wrote {plot}")
    except (AlfError, OSError) as e:
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    define_flags()
    flags.mark_flag_as_required("root_dir")
    cli.run(lambda argv: sys.exit(main(argv)), __name__)
