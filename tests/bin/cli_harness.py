"""Running the train CLI as a real process tree in its own session, and
checking that nothing of it is left afterwards."""
import os
import signal
import subprocess
import threading
import time
from typing import Dict, List, Optional, Tuple

from alf.utils.process import stat_fields


def session_processes(sid: int) -> List[Tuple[int, str]]:
    """(pid, state) of the processes in session ``sid`` (zombies too)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields and int(fields[3]) == sid:  # field 6 of stat: session
                pids.append((int(entry), fields[0]))
    return pids


def live(sid: int) -> List[int]:
    """PIDs of the running (not zombie) processes in session ``sid``."""
    return [pid for pid, state in session_processes(sid) if state != "Z"]


def assert_no_process_left(sid: int, seconds: float = 15) -> None:
    """Waits up to ``seconds`` for session ``sid`` to empty; kills and fails
    otherwise."""
    deadline = time.time() + seconds
    while live(sid) and time.time() < deadline:
        time.sleep(0.2)
    left = live(sid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


# Every `Run` started in this test process: `end_sessions_left` ends those
# a failing test left running (a 10M-step training would load the cores
# for the rest of the suite and fail the tests after it).
_started: List["Run"] = []


def end_sessions_left() -> None:
    """Kills the whole session of every `Run` started since the last call
    (the tests' teardown; nothing if they ended)."""
    while _started:
        run = _started.pop()
        if run.proc.poll() is None or live(run.proc.pid):
            try:
                os.killpg(run.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pid in live(run.proc.pid):  # children outside its group
                os.kill(pid, signal.SIGKILL)
            run.proc.wait()


class Run:
    """The CLI in its own session, its output collected by threads.

    Args:
        cmd: the command line.
        env: its environment.
        marker: a line containing this sets `started`.
    """

    def __init__(self, cmd: List[str], env: Optional[Dict[str, str]] = None,
                 marker: str = "iter ", cwd: Optional[str] = None):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     env=env, cwd=cwd,
                                     start_new_session=True)
        _started.append(self)
        self.lines: List[str] = []
        self.started = threading.Event()
        self._marker = marker
        self._readers = [threading.Thread(target=self._read, args=(s, ),
                                          daemon=True)
                         for s in (self.proc.stdout, self.proc.stderr)]
        for t in self._readers:
            t.start()

    def _read(self, stream):
        for line in stream:
            self.lines.append(line)
            if self._marker in line:
                self.started.set()

    def wait_started(self, timeout: float = 120) -> None:
        assert self.started.wait(timeout), self.out[-3000:]

    def finish(self, timeout: float = 90) -> int:
        """Waits for the exit code; kills the session if it takes longer."""
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            for t in self._readers:
                t.join(5)

    @property
    def out(self) -> str:
        return "".join(self.lines)
