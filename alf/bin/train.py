r"""Train an algorithm from gin files.

    python -m alf.bin.train --gin_file ppo_cart_pole.gin --root_dir ~/runs/cp \
        [--gin_param 'TrainerConfig.num_env_steps=20000' ...] \
        [--distributed none|multi-gpu|multi-process [--num_processes N]]

Under ``torchrun`` (RANK and WORLD_SIZE set), each process joins torchrun's
group (NCCL with GPUs, gloo without); that is the multi-node path.

``--gin_file`` is a path, or a bare name looked up in the current directory and
then in alf's packaged examples. Running again with the same ``--root_dir``
resumes from the newest checkpoint.
"""
import contextlib
import os
import signal
import sys
from typing import List, Tuple

from absl import app, flags, logging

from alf.bin import cli
from alf.utils import process
from alf.utils.errors import AlfError, one_line
from alf.utils.process import EXIT_ERROR


def define_flags() -> None:
    """The CLI's flags: defined when run as a program, not on import, so
    that scripts can import this module beside another alf CLI (each
    defines ``--root_dir``)."""
    flags.DEFINE_string("root_dir", None, "Folder for summaries, eval.csv, "
                        "config.gin and checkpoints; an existing run is "
                        "resumed.")
    flags.DEFINE_multi_string("gin_file", None, "Gin file(s): a path or the "
                              "name of a file in the current folder or "
                              "alf/examples.")
    flags.DEFINE_multi_string("gin_param", None, "Gin binding(s), e.g. "
                              "'TrainerConfig.num_env_steps=20000'.")
    flags.DEFINE_enum("distributed", "none", ["none", "multi-gpu",
                                               "multi-process"],
                      "none: one process; multi-gpu: one process per visible "
                      "GPU (NCCL); multi-process: --num_processes CPU "
                      "processes (gloo).")
    flags.DEFINE_integer("num_processes", 2, "Processes for --distributed "
                         "multi-process.", lower_bound=1)
    flags.DEFINE_integer("max_restarts", 0, "How many times a run whose "
                         "process (with --distributed: any rank) crashed, "
                         "was killed or stalled is started again (all "
                         "ranks), resuming from the last checkpoint; a "
                         "single process then runs under the launcher "
                         "too.", lower_bound=0)
    flags.DEFINE_float("stop_grace", 120.0, "With --distributed: seconds the "
                       "ranks get to finish their iteration and save a "
                       "checkpoint after Ctrl-C, SIGTERM or SIGHUP; past it, "
                       "or on a second Ctrl-C, they are aborted without one.",
                       lower_bound=0.0)


FLAGS = flags.FLAGS


def check_root_dir(root_dir: str) -> str:
    """Creates ``root_dir`` if needed and checks that it can be written.

    Raises:
        AlfError: naming the folder and the reason.
    """
    from alf.trainers.run_folder import probe_write

    root_dir = os.path.abspath(os.path.expanduser(root_dir))
    if os.path.exists(root_dir) and not os.path.isdir(root_dir):
        # makedirs would only say "File exists".
        raise AlfError(f"--root_dir {root_dir} is a file, not a folder; "
                       "choose a folder you can write to")
    try:
        os.makedirs(root_dir, exist_ok=True)
        probe_write(root_dir)
    except OSError as e:
        raise AlfError(f"--root_dir {root_dir} is not writable "
                       f"({e.strerror or e}); choose a folder you can write "
                       "to") from e
    return root_dir


def train_parsed(root_dir: str) -> dict:
    """Trains with the configuration already parsed in this process."""
    from alf.trainers import Trainer
    return Trainer(root_dir).train()


def _under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _train_under_torchrun(root_dir: str) -> int:
    import torch

    from alf.trainers import TrainingInterrupted
    from alf.utils import distributed

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if rank != 0:
        logging.set_verbosity(logging.WARNING)
    # torchrun's agent killed outright leaves its workers to train on
    # unattended (holding the run's lock): as under alf's own launcher,
    # the kernel then stops them with a SIGTERM, which checkpoints.
    process.die_with_parent(signal.SIGTERM)
    if os.getppid() == 1:  # the agent died before that took effect
        print(f"alf.bin.train: rank {rank}: torchrun's agent is gone; not "
              "starting", file=sys.stderr, flush=True)
        return EXIT_ERROR
    try:
        with distributed.process_group(rank, world, backend, use_env=True):
            try:
                train_parsed(root_dir)
            except Exception as e:  # noqa: BLE001 - torchrun has the code
                if not distributed.is_peer_failure(e):
                    raise
                stopped = process.stop_received()
                if stopped:
                    # The stop's consequence, not a failure: a peer still
                    # starting up (no handlers yet) ended on the signal at
                    # once and left this rank inside a collective.
                    logging.warning(
                        "%s: rank %d stopped; a peer ended first, before "
                        "this iteration could end, so the last checkpoint "
                        "stays: run the same command to resume",
                        process.signal_name(stopped), rank)
                    return process.exit_code_for(stopped)
                # A consequence: name the cause while the heartbeats of
                # the group can still be read.
                print(f"alf.bin.train: rank {rank} lost its peers: "
                      f"{_who_failed(distributed.silent_ranks(), rank)} "
                      f"({distributed.peer_failure_reason(e)})",
                      file=sys.stderr, flush=True)
                return EXIT_ERROR
    except TrainingInterrupted as e:
        if rank == 0 and not e.said:
            logging.warning("%s", e)
        return e.exit_code
    return 0


def _who_failed(heard, rank: int) -> str:
    """Names the ranks that `distributed.silent_ranks` found silent."""
    silent, seconds = heard or ([], 0.0)
    if heard is not None and not silent:
        return ("every rank is alive and answering, so "
                + process.MISMATCHED_COLLECTIVES)
    if not silent:
        return "another rank failed (torchrun names it)"
    names = ", ".join(f"rank {r}" for r in silent)
    return (f"{names} showed no sign of life for {seconds:g} s (stalled or "
            f"dead; a 'Root Cause' of rank {rank} below only timed out "
            "waiting)")


def _num_gpus_for_multi_gpu() -> int:
    import torch
    n = torch.cuda.device_count()
    if n == 0:
        raise AlfError("--distributed multi-gpu needs a GPU and none is "
                       "visible (torch.cuda.device_count() == 0); use "
                       "--distributed multi-process --num_processes N to "
                       "train with N CPU processes")
    return n


def _processes_and_backend() -> Tuple[int, str]:
    """How many ranks ``--distributed`` asks for, and their backend."""
    if FLAGS.distributed == "multi-process":
        return FLAGS.num_processes, "gloo"
    if FLAGS.distributed == "multi-gpu":
        n = _num_gpus_for_multi_gpu()
        if n == 1:
            logging.warning("--distributed multi-gpu: one GPU visible; "
                            "training in a single process on it")
        return n, "nccl"
    return 1, "gloo"


def _parse_config(gin_files, gin_params) -> None:
    """`alf.trainers.parse_config`, which a rank imports when it runs this
    (not while it unpickles its arguments, before it handles Ctrl-C)."""
    from alf.trainers import parse_config
    parse_config(gin_files, gin_params)


def _timeout_text() -> str:
    from alf.utils.distributed import collective_timeout
    return f"{collective_timeout().total_seconds():g} s"


def main(argv: List[str]) -> int:
    """The absl entry point; returns the process exit code."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    root = FLAGS.root_dir and os.path.abspath(os.path.expanduser(
        FLAGS.root_dir))
    made = bool(root) and not os.path.exists(root)
    # Until training listens for them (or the launcher does), a stop ends
    # the start-up with one line, not a traceback or a silent death.
    process.forget_stop()  # an earlier call's (main called again)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_starting)
    signal.signal(signal.SIGINT, process.interrupt_unless_stopping)
    try:
        code = _main()
    except (KeyboardInterrupt, _StartupStopped) as e:
        # Helpers interrupted while they started (whose owner never got
        # to close them) ignore the SIGTERM that multiprocessing's exit
        # ends them with, and it would wait for them.
        import multiprocessing
        for child in multiprocessing.active_children():
            child.kill()
        got = int(getattr(e, "signum", signal.SIGINT))
        stopped = process.stop_received()
        if stopped:  # a Ctrl-C again while the stopped run exits
            print(f"alf.bin.train: {process.signal_name(got)} while "
                  f"stopping on {process.signal_name(stopped)}; the "
                  "checkpoints saved stay: run the same command to resume",
                  file=sys.stderr, flush=True)
        else:
            print(f"alf.bin.train: {process.stopped_before_training(got)}",
                  file=sys.stderr, flush=True)
        code = process.exit_code_for(stopped or got)
    finally:
        if process.stop_received() or _over:
            # Exiting after a stop or a finished run: a repeat (the
            # terminal's Ctrl-C, a scheduler's SIGTERM) has nothing to add,
            # and must not turn the exit into a traceback or another code.
            for sig in process.STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
        else:
            for sig in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if (code != 0 and made and os.path.isdir(root) and not os.listdir(root)
            and os.environ.get("RANK", "0") == "0"):
        # A run refused after its folder was made (an unknown environment
        # id is found when the environment is built) leaves no trace.
        # Under torchrun rank 0 alone: the others would race it.
        with contextlib.suppress(OSError):
            os.rmdir(root)
    return code


# Set once training returned: the run is over.
_over = False


def _training_over() -> None:
    """A stop signal from now on has nothing to stop: it must neither be
    taken for one before training (the handlers before training are back)
    nor kill the finished run's exit with the signal."""
    global _over
    _over = True
    for sig in process.STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


class _StartupStopped(BaseException):
    """SIGTERM or SIGHUP before training installed its handlers (a
    BaseException, as KeyboardInterrupt: no ``except Exception`` on the way
    may take it for a failure)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _stop_starting(signum, frame):
    if process.stop_received():
        return  # training stopped on an earlier signal: it is exiting
    process.raise_stop_once(_StartupStopped(signum))


def _main() -> int:
    # Until training listens for it, "checkpoint now" must not kill the run.
    signal.signal(process.CHECKPOINT_SIGNAL, signal.SIG_IGN)
    process.import_torch()
    from alf.trainers import Trainer, TrainingInterrupted, parse_config
    from alf.trainers.run_folder import check_run_folder
    from alf.trainers.run_lock import RunLock
    try:
        if not FLAGS.root_dir:
            raise AlfError("--root_dir is required, e.g. --root_dir "
                           "~/runs/cart_pole")
        if not FLAGS.gin_file:
            raise AlfError("--gin_file is required, e.g. --gin_file "
                           "ppo_cart_pole.gin")
        if (FLAGS["num_processes"].present and not _under_torchrun()
                and FLAGS.distributed != "multi-process"):
            raise AlfError(
                f"--num_processes {FLAGS.num_processes} needs --distributed "
                f"multi-process (it is --distributed {FLAGS.distributed})")
        gin_files, gin_params = FLAGS.gin_file, FLAGS.gin_param or []
        # Validate the config before anything is written or spawned.
        parse_config(gin_files, gin_params)
        if _under_torchrun():
            if FLAGS.max_restarts:
                raise AlfError("--max_restarts is the built-in launcher's; "
                               "under torchrun use torchrun --max-restarts")
            if FLAGS.distributed != "none" or FLAGS["num_processes"].present:
                # torchrun started the processes: the launcher's flags
                # would be ignored without a word.
                given = ([f"--distributed {FLAGS.distributed}"]
                         if FLAGS.distributed != "none" else []) + (
                             ["--num_processes"]
                             if FLAGS["num_processes"].present else [])
                raise AlfError(
                    f"{' '.join(given)} "
                    f"{'is' if len(given) == 1 else 'are'} the built-in "
                    "launcher's; under torchrun (WORLD_SIZE="
                    f"{os.environ['WORLD_SIZE']}) torchrun starts the "
                    "processes (--nproc_per_node) and picks NCCL with GPUs, "
                    "gloo without: drop it")
            root_dir = check_root_dir(FLAGS.root_dir)
            if os.environ["RANK"] == "0":  # the chief's, as in the Trainer
                RunLock.check_free(root_dir)
                check_run_folder(root_dir)
            process.exit_now(_train_under_torchrun(root_dir))
        num_processes, backend = _processes_and_backend()
        from alf.trainers import TrainerConfig
        config = TrainerConfig()
        config.resolve_device(backend if num_processes > 1 else "none")
        config.per_rank(num_processes)  # sizes must divide
        root_dir = check_root_dir(FLAGS.root_dir)
        RunLock.check_free(root_dir)
        check_run_folder(root_dir)
        if num_processes > 1 or FLAGS.max_restarts:
            from alf.bin.launch import launch
            code = launch(train_parsed, (root_dir, ), num_processes,
                          prog="alf.bin.train", backend=backend,
                          setup=(_parse_config,
                                 (gin_files, gin_params)),
                          max_restarts=FLAGS.max_restarts,
                          stop_grace=FLAGS.stop_grace,
                          timeout_hint=_timeout_text())
            _training_over()
            return code
        Trainer(root_dir).train()
        _training_over()
    except TrainingInterrupted as e:
        if not e.said:
            logging.warning("%s", e)
        return e.exit_code
    except AlfError as e:
        # Under torchrun every rank meets the same bad input (or the same
        # agreed failure): rank 0 says so; a process that died (retryable)
        # is each rank's own.
        if ((e.retryable and not e.on_every_rank)
                or os.environ.get("RANK", "0") == "0"):
            print(f"alf.bin.train: error: {one_line(e)}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def run_main():
    """Console-script entry point."""
    define_flags()
    cli.run(lambda argv: sys.exit(main(argv)), __name__)


if __name__ == "__main__":
    run_main()
