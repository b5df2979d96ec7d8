"""End to end in a real terminal: tmux runs `mgpu-tui`, keys drive it, the screen is read."""

import subprocess
import time

from conftest import CLI


def screen(session: str) -> str:
    done = subprocess.run(["tmux", "capture-pane", "-t", session, "-p"], capture_output=True, text=True)
    return done.stdout


def wait_screen(session: str, text: str, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in screen(session):
            return True
        time.sleep(0.2)
    return False


def test_app_in_a_real_terminal_shows_the_host_and_quits_on_q(tmp_path):
    session = f"mgpu-test-{time.monotonic_ns()}"
    marker = tmp_path / "exit"
    command = f"cd {tmp_path} && {CLI[0]} ; echo $? > {marker}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", command], check=True)
    try:
        assert wait_screen(session, "Host"), screen(session)
        assert "CPU" in screen(session) and "Dashboard" in screen(session)
        subprocess.run(["tmux", "send-keys", "-t", session, "t"], check=True)
        assert wait_screen(session, "no NVIDIA GPU here") or wait_screen(session, "GPU0")
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
