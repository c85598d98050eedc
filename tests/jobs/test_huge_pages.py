"""The jobs' processes run without transparent huge pages (jobs.lake.engine_config.no_huge_pages): zeroing 2 MiB pages
on every fault was a fifth of the ingest's CPU. The flag is the process's own (``/proc/self/status``)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHECK = ("from jobs.lake.engine_config import no_huge_pages; off = no_huge_pages(); "
         "flag = [ln for ln in open('/proc/self/status') if ln.startswith('THP_enabled:')]; "
         "print(off, flag[0].split()[1] if flag else 'n/a')")


def _run(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "RMQ_RECON_HUGE_PAGES"} | env_extra
    return subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True,
                          check=True).stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_THP_DISABLE) is Linux's")
def test_a_job_process_turns_huge_pages_off_unless_told_to_keep_them() -> None:
    off, flag = _run({})
    assert off == "True"
    if flag != "n/a":  # (kernels before 6.x do not show the flag)
        assert flag == "0"
    kept, flag = _run({"RMQ_RECON_HUGE_PAGES": "1"})
    assert kept == "False"
    if flag != "n/a":
        assert flag == "1"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_THP_DISABLE) is Linux's")
def test_the_cli_turns_them_off_before_any_command(tmp_path) -> None:
    """A command that fails at once (no landing zone there) has already turned them off."""
    code = ("import jobs.cli\n"
            f"rc = jobs.cli.main(['ingest', '--landing', {str(tmp_path / 'none')!r}, '--lake', {str(tmp_path)!r}])\n"
            "flag = [ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('THP_enabled:')]\n"
            "print(rc, flag[0] if flag else 'n/a')")
    env = {k: v for k, v in os.environ.items() if k != "RMQ_RECON_HUGE_PAGES"}
    rc, flag = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True).stdout.split()
    assert rc == "2" and flag in ("0", "n/a")
