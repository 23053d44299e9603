"""`python -m lab`: one clear refusal (exit 4) where the lab cannot run; profile parsing."""

from __future__ import annotations

from click.testing import CliRunner

from lab import cli


def test_up_without_root_or_nspawn_is_one_clear_message_and_exit_4(monkeypatch):
    reason = "the lab needs root (it mounts overlays)"
    monkeypatch.setattr(cli, "unavailable_reason", lambda: reason)
    for args in (["up", "--hosts", "2"], ["down"], ["build"]):
        res = CliRunner().invoke(cli.lab, args)
        assert res.exit_code == 4, (args, res.output)
        assert res.output.strip().splitlines() == [
            "Error: the simulated lab cannot run here: the lab needs root (it mounts overlays)."
        ]


def test_unknown_profile_is_a_usage_error():
    res = CliRunner().invoke(cli.lab, ["up", "--profile", "h100-sxm-8,v100-16"])
    assert res.exit_code == 2
    assert "unknown profile(s) v100-16" in res.output


def test_hosts_range_is_1_to_16():
    res = CliRunner().invoke(cli.lab, ["up", "--hosts", "17"])
    assert res.exit_code == 2 and "1<=x<=16" in res.output
