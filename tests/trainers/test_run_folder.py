"""`check_run_folder`: a root dir whose entries are of the wrong kind is
refused before anything is written."""
import os

import pytest

from alf.trainers.run_folder import check_run_folder
from alf.utils.errors import AlfError


def test_a_fresh_or_complete_root_dir_passes(tmp_path):
    check_run_folder(str(tmp_path / "new"))  # not there yet
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "eval.csv").write_text("env_steps\n")
    check_run_folder(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "eval.csv"]
    assert os.listdir(tmp_path / "ckpt") == []  # the probe is removed


@pytest.mark.parametrize("make, said", [
    (lambda p: os.symlink(p / "unmounted" / "ckpt", p / "ckpt"),
     "ckpt is a link to {p}/unmounted/ckpt, which does not exist (storage "
     "not mounted?)"),
    (lambda p: (p / "ckpt").write_text("x"),
     "ckpt is a file, not the run's folder of checkpoints; move it away"),
    (lambda p: (p / "config.gin").mkdir(),
     "config.gin is a folder, not the run's config.gin; move it away"),
    (lambda p: (p / "eval.csv").mkdir(),
     "eval.csv is a folder, not the run's eval.csv; move it away"),
])
def test_an_entry_of_the_wrong_kind_is_named(tmp_path, make, said):
    make(tmp_path)
    with pytest.raises(AlfError) as info:
        check_run_folder(str(tmp_path))
    assert str(info.value).startswith(
        f"{tmp_path}/" + said.format(p=tmp_path)), str(info.value)


def test_an_unwritable_checkpoint_folder_is_named(tmp_path, monkeypatch):
    """As root, chmod does not stop a write: the probe's open is made to
    fail as an immutable folder's does."""
    import builtins
    import errno
    (tmp_path / "ckpt").mkdir()
    real_open = builtins.open

    def refusing(path, *a, **kw):
        if ".write-test-" in str(path):
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real_open(path, *a, **kw)
    monkeypatch.setattr(builtins, "open", refusing)
    with pytest.raises(AlfError) as info:
        check_run_folder(str(tmp_path))
    assert str(info.value) == (
        f"{tmp_path}/ckpt is not writable (Operation not permitted): no "
        "checkpoint could be saved; make it writable (check its owner, "
        "mode and attributes: ls -l, lsattr)")
