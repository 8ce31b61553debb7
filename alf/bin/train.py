r"""Train an algorithm from gin files.

    python -m alf.bin.train --gin_file ppo_cart_pole.gin --root_dir ~/runs/cp \
        [--gin_param 'TrainerConfig.num_env_steps=20000' ...]

``--gin_file`` is a path, or a bare name looked up in the current directory and
then in alf's packaged examples. Running again with the same ``--root_dir``
resumes from the newest checkpoint.
"""
import os
import sys
from typing import List, Sequence

from absl import app, flags, logging

from alf.utils.errors import AlfError

flags.DEFINE_string("root_dir", None, "Folder for summaries, eval.csv, "
                    "config.gin and checkpoints; an existing run is resumed.")
flags.DEFINE_multi_string("gin_file", None, "Gin file(s): a path or the name "
                          "of a file in the current folder or alf/examples.")
flags.DEFINE_multi_string("gin_param", None, "Gin binding(s), e.g. "
                          "'TrainerConfig.num_env_steps=20000'.")
FLAGS = flags.FLAGS

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


def check_root_dir(root_dir: str) -> str:
    """Creates ``root_dir`` if needed and checks that it can be written.

    Raises:
        AlfError: naming the folder and the reason.
    """
    root_dir = os.path.abspath(os.path.expanduser(root_dir))
    probe = os.path.join(root_dir, f".write-test-{os.getpid()}")
    try:
        os.makedirs(root_dir, exist_ok=True)
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        raise AlfError(f"--root_dir {root_dir} is not writable "
                       f"({e.strerror or e}); choose a folder you can write "
                       "to") from e
    return root_dir


def train_process(root_dir: str, gin_files: Sequence[str],
                  gin_params: Sequence[str]) -> dict:
    """Parses the config and trains in this process (any rank).

    Returns:
        The final evaluation's metrics (empty on ranks other than 0).
    """
    import alf.config
    from alf.trainers import Trainer

    alf.config.parse_config(gin_files, gin_params)
    return Trainer(root_dir).train()


def main(argv: List[str]) -> int:
    """The absl entry point; returns the process exit code."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from alf.trainers import TrainingInterrupted
    try:
        if not FLAGS.root_dir:
            raise AlfError("--root_dir is required, e.g. --root_dir "
                           "~/runs/cart_pole")
        if not FLAGS.gin_file:
            raise AlfError("--gin_file is required, e.g. --gin_file "
                           "ppo_cart_pole.gin")
        root_dir = check_root_dir(FLAGS.root_dir)
        train_process(root_dir, FLAGS.gin_file, FLAGS.gin_param or [])
    except TrainingInterrupted as e:
        logging.warning("%s", e)
        return EXIT_INTERRUPTED
    except AlfError as e:
        print(f"alf.bin.train: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def run_main():
    """Console-script entry point."""
    app.run(lambda argv: sys.exit(main(argv)))


if __name__ == "__main__":
    run_main()
