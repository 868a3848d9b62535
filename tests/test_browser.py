"""tests/browser.py: a browser test without Chromium skips locally and fails under CI=true."""

import re

import browser
import pytest


@pytest.fixture
def no_chromium(monkeypatch, tmp_path):
    """A PATH with no browser on it, and no LAB_CHROMIUM."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("LAB_CHROMIUM", raising=False)


def test_without_chromium_a_local_run_skips_with_the_sentence(no_chromium, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^Chromium is not installed \(apt-get install chromium\)$"):
        browser.chromium_or_skip()


@pytest.mark.parametrize("value", ["true", "TRUE", "1"])
def test_without_chromium_ci_fails_with_the_sentence(no_chromium, monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match=r"^Chromium is not installed \(apt-get install chromium\)"):
        browser.chromium_or_skip()


@pytest.mark.parametrize("value", ["", "false", "0"])
def test_ci_set_to_something_else_still_skips(no_chromium, monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match=re.escape(browser.MISSING)):
        browser.chromium_or_skip()


def test_lab_chromium_naming_no_program_is_missing_and_said(monkeypatch, tmp_path):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("LAB_CHROMIUM", str(tmp_path / "chrome"))
    with pytest.raises(pytest.fail.Exception, match=r"Chromium is not installed .*; LAB_CHROMIUM='.*chrome' names no"):
        browser.chromium_or_skip()


def test_chromium_on_path_is_found_under_any_of_its_names(monkeypatch, tmp_path):
    fake = tmp_path / "chromium-browser"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("LAB_CHROMIUM", raising=False)
    monkeypatch.setenv("CI", "true")
    assert browser.chromium_or_skip() == str(fake)


def test_lab_chromium_wins_over_path(monkeypatch, tmp_path):
    chosen = tmp_path / "my-chrome"
    chosen.write_text("#!/bin/sh\n")
    chosen.chmod(0o755)
    monkeypatch.setenv("LAB_CHROMIUM", str(chosen))
    assert browser.find_chromium() == str(chosen)
