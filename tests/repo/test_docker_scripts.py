"""The Docker entry points, without Docker.

A fake `docker` on PATH records every call (argv + the few environment variables that
matter) as one JSON line, and answers `info`, `image inspect`, `pull`, `buildx`,
`build` and `run` as each test asks. The scripts are copied into a throw-away repository
so that the mount path, the test scripts and the apt sources are all under the test's
control. docker/entrypoint.sh (the in-container half) runs directly on this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash") or "/bin/bash"

FAKE_DOCKER = f"""#!{sys.executable}
import json, os, shutil, sys
argv = sys.argv[1:]
log = os.environ["FAKE_DOCKER_LOG"]
env = {{k: os.environ.get(k) for k in ("HF_TOKEN", "WANDB_API_KEY", "DOCKER_BUILDKIT")}}
with open(log, "a") as f:
    f.write(json.dumps({{"argv": argv, "env": env}}) + "\\n")
cmd = argv[0] if argv else ""
if cmd == "info":
    fmt = argv[argv.index("--format") + 1] if "--format" in argv else ""
    if "Runtimes" in fmt:
        print(os.environ.get("FAKE_DOCKER_RUNTIMES", '{{"runc":{{"path":"runc"}}}}'))
    elif "CDISpecDirs" in fmt:
        print(os.environ.get("FAKE_DOCKER_CDI", ""))
    sys.exit(int(os.environ.get("FAKE_DOCKER_INFO_RC", "0")))
if cmd == "buildx":
    if argv[1:2] == ["version"]:
        sys.exit(0 if os.environ.get("FAKE_DOCKER_BUILDX") else 1)
    argv = argv[1:]
    cmd = "build"
if cmd == "image":
    sys.exit(0 if argv[-1] in os.environ.get("FAKE_DOCKER_IMAGES", "").split() else 1)
if cmd == "pull":
    sys.exit(0 if os.environ.get("FAKE_DOCKER_PULL_OK") else 1)
if cmd == "import":
    with open(log + ".import.tar", "wb") as f:
        f.write(sys.stdin.buffer.read())
    sys.exit(0)
if cmd == "build":
    if "--help" in argv:
        sys.exit(0 if os.environ.get("FAKE_DOCKER_BUILDKIT") else 1)
    shutil.copy(argv[argv.index("--file") + 1], log + ".Dockerfile")
    with open(log + ".context", "w") as f:
        f.write("\\n".join(sorted(os.listdir(argv[-1]))))
    shutil.copy(os.path.join(argv[-1], "pyproject.toml"), log + ".pyproject.toml")
    sys.exit(0)
if cmd == "run":
    sys.exit(int(os.environ.get("FAKE_DOCKER_RUN_RC", "0")))
sys.exit(0)
"""

# The few tools the run scripts need; PATH holds only these (and the fakes), so that a
# real docker / nvidia-smi / nvidia-container-runtime-hook on this machine cannot leak in.
RUN_TOOLS = ["bash", "dirname", "id", "mkdir", "grep", "cat"]


def _write_exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def fake_repo(tmp_path: Path) -> Path:
    """A copy of the Docker scripts in a fresh tree, plus a dummy functional test."""
    repo = tmp_path / "repo"
    (repo / "tests" / "functional").mkdir(parents=True)
    (repo / "docker").mkdir()
    for rel in [
        "tests/run_unit_in_docker.sh",
        "tests/run_functional_in_docker.sh",
        "docker/run_lib.sh",
        "docker/run.sh",
        "docker/build.sh",
        "docker/Dockerfile",
        "docker/entrypoint.sh",
        "docker/deps_pyproject.py",
        "pyproject.toml",
        "uv.lock",
    ]:
        shutil.copy(REPO / rel, repo / rel)
    (repo / "tools" / "py").mkdir(parents=True)
    shutil.copy(REPO / "tools/py/pyproject.toml", repo / "tools/py/pyproject.toml")
    (repo / "tests" / "functional" / "sft.sh").write_text("echo sft\n")
    return repo


class Fakes:
    """PATH with a fake docker (and optionally nvidia-smi) and the call log."""

    def __init__(self, tmp_path: Path, minimal_path: bool) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.log = tmp_path / "docker_calls.jsonl"
        _write_exe(self.bin / "docker", FAKE_DOCKER)
        if minimal_path:
            for tool in RUN_TOOLS:
                found = shutil.which(tool)
                assert found, f"{tool} is needed by the scripts under test"
                (self.bin / tool).symlink_to(found)
            self.path = str(self.bin)
        else:
            self.path = f"{self.bin}:{os.environ['PATH']}"
        self.env: dict[str, str] = {"PATH": self.path, "FAKE_DOCKER_LOG": str(self.log), "HOME": str(tmp_path)}

    def gpus(self, listing: str | None) -> None:
        """A fake nvidia-smi: `-L` prints listing (None: fails like a driverless host)."""
        if listing is None:
            _write_exe(self.bin / "nvidia-smi", f"#!{BASH}\nexit 9\n")
        else:
            _write_exe(self.bin / "nvidia-smi", f"#!{BASH}\nprintf '%s\\n' '{listing}'\n")

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def run_call(self) -> list[str]:
        runs = [c["argv"] for c in self.calls() if c["argv"][:1] == ["run"]]
        assert len(runs) == 1, self.calls()
        return runs[0]


@pytest.fixture
def fakes(tmp_path: Path) -> Fakes:
    f = Fakes(tmp_path, minimal_path=True)
    f.gpus(None)
    return f


def _run(
    repo: Path, script: str, args: list[str], env: dict[str, str], stdin: Any = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(repo / script), *args], env=env, cwd=repo, stdin=stdin, capture_output=True, text=True, timeout=60
    )


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


# ---------------------------------------------------------------- run_unit_in_docker.sh


def test_unit_without_container_prints_usage_and_exits_2(fake_repo: Path, fakes: Fakes) -> None:
    res = _run(fake_repo, "tests/run_unit_in_docker.sh", ["-k", "x"], fakes.env)
    assert res.returncode == 2
    assert "Usage: CONTAINER=<image> bash tests/run_unit_in_docker.sh" in res.stderr
    assert "CONTAINER is not set" in res.stderr
    assert fakes.calls() == []


def test_unit_without_docker_prints_usage_and_exits_2(fake_repo: Path, fakes: Fakes) -> None:
    (fakes.bin / "docker").unlink()
    res = _run(fake_repo, "tests/run_unit_in_docker.sh", [], {**fakes.env, "CONTAINER": "img:1"})
    assert res.returncode == 2
    assert "Usage:" in res.stderr and "docker not found" in res.stderr


def test_unit_runs_run_unit_sh_in_the_mounted_repo(fake_repo: Path, fakes: Fakes) -> None:
    env = {**fakes.env, "CONTAINER": "img:1"}
    res = _run(fake_repo, "tests/run_unit_in_docker.sh", ["-k", "a b", "--hf-gated"], env)
    assert res.returncode == 0, res.stderr
    argv = fakes.run_call()
    image_at = argv.index("img:1")
    # Everything after the image is the command, arguments intact (one with a space).
    assert argv[image_at + 1 :] == [
        "bash",
        "docker/entrypoint.sh",
        "--prepare-assets",
        "bash",
        "tests/run_unit.sh",
        "-k",
        "a b",
        "--hf-gated",
    ]
    opts = argv[:image_at]
    assert "--rm" in opts
    assert f"{fake_repo}:/workspace" in _pairs(opts, "-v")
    assert _pairs(opts, "-w") == ["/workspace"]
    env_opts = _pairs(opts, "-e")
    assert f"HOST_UID={os.getuid()}" in env_opts and f"HOST_GID={os.getgid()}" in env_opts
    assert any(e.startswith("HOST_UMASK=") for e in env_opts)
    # Not a TTY, no GPU: neither -it nor --gpus.
    assert "-it" not in opts and "--gpus" not in opts and "--device" not in opts


def test_exit_code_of_the_container_is_forwarded(fake_repo: Path, fakes: Fakes) -> None:
    env = {**fakes.env, "CONTAINER": "img:1", "FAKE_DOCKER_RUN_RC": "3"}
    assert _run(fake_repo, "tests/run_unit_in_docker.sh", [], env).returncode == 3


def test_secrets_by_name_and_hf_caches_outside_the_repo_mounted_at_their_path(
    fake_repo: Path, fakes: Fakes, tmp_path: Path
) -> None:
    hf_home = tmp_path / "hf" / "home"  # does not exist yet: the script creates it as the user
    datasets = tmp_path / "hf" / "datasets"
    env = {
        **fakes.env, "CONTAINER": "img:1", "HF_TOKEN": "hf_secret_value", "WANDB_API_KEY": "wandb_secret",
        "HF_HOME": str(hf_home), "HF_DATASETS_CACHE": str(datasets),
    }  # fmt: skip
    assert _run(fake_repo, "tests/run_unit_in_docker.sh", [], env).returncode == 0
    argv = fakes.run_call()
    assert {"HF_TOKEN", "WANDB_API_KEY"} <= set(_pairs(argv, "-e"))
    assert not any("hf_secret_value" in a or "wandb_secret" in a for a in argv)  # never on the command line
    logged = fakes.calls()[-1]["env"]
    assert (logged["HF_TOKEN"], logged["WANDB_API_KEY"]) == ("hf_secret_value", "wandb_secret")  # docker copies them
    assert {f"{hf_home}:{hf_home}", f"{datasets}:{datasets}"} <= set(_pairs(argv, "-v"))
    assert {f"HF_HOME={hf_home}", f"HF_DATASETS_CACHE={datasets}"} <= set(_pairs(argv, "-e"))
    assert hf_home.is_dir() and datasets.is_dir()


def test_hf_home_defaults_to_hf_home_in_the_checkout(fake_repo: Path, fakes: Fakes) -> None:
    assert _run(fake_repo, "tests/run_unit_in_docker.sh", [], {**fakes.env, "CONTAINER": "i"}).returncode == 0
    argv = fakes.run_call()
    # Upstream's default place, reached through the checkout's mount (no second mount).
    assert [e for e in _pairs(argv, "-e") if e.startswith(("HF_", "WANDB"))] == ["HF_HOME=/workspace/hf_home"]
    assert _pairs(argv, "-v") == [f"{fake_repo}:/workspace"]
    assert (fake_repo / "hf_home").is_dir()


def test_a_cache_inside_the_checkout_is_used_through_workspace(fake_repo: Path, fakes: Fakes) -> None:
    env = {**fakes.env, "CONTAINER": "i", "HF_HOME": "caches/hf", "HF_DATASETS_CACHE": str(fake_repo / "ds")}
    assert _run(fake_repo, "tests/run_unit_in_docker.sh", [], env).returncode == 0
    argv = fakes.run_call()
    assert {"HF_HOME=/workspace/caches/hf", "HF_DATASETS_CACHE=/workspace/ds"} <= set(_pairs(argv, "-e"))
    assert _pairs(argv, "-v") == [f"{fake_repo}:/workspace"]


def test_an_hf_home_that_cannot_be_made_is_one_line(fake_repo: Path, fakes: Fakes, tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    env = {**fakes.env, "CONTAINER": "i", "HF_HOME": str(tmp_path / "a_file" / "hf")}
    res = _run(fake_repo, "tests/run_functional_in_docker.sh", ["functional/sft.sh"], env)
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        f"error: cannot create HF_HOME={tmp_path}/a_file/hf (set HF_HOME to a folder you can write)"
    ]
    assert not [c for c in fakes.calls() if c["argv"][:1] == ["run"]]


@pytest.mark.parametrize(
    "listing, runtimes, cdi, expected",
    [
        (None, '{"nvidia":{"path":"nvidia-container-runtime"}}', "", []),  # no GPUs
        ("GPU 0: NVIDIA H200 (UUID: GPU-1)", '{"runc":{}}', "", []),  # no runtime
        ("GPU 0: NVIDIA H200 (UUID: GPU-1)", '{"nvidia":{"path":"x"},"runc":{}}', "", ["--gpus", "all"]),
        ("No devices were found", '{"nvidia":{"path":"x"}}', "", []),
        ("GPU 0: NVIDIA H200 (UUID: GPU-1)", '{"runc":{}}', "CDI", ["--device", "nvidia.com/gpu=all"]),
    ],
    ids=["no-gpu", "gpu-no-runtime", "gpu-nvidia-runtime", "smi-no-devices", "gpu-cdi"],
)
def test_gpus_only_with_gpus_and_runtime_support(
    fake_repo: Path, fakes: Fakes, tmp_path: Path, listing: str | None, runtimes: str, cdi: str, expected: list[str]
) -> None:
    fakes.gpus(listing)
    env = {**fakes.env, "CONTAINER": "img:1", "FAKE_DOCKER_RUNTIMES": runtimes}
    if cdi:
        spec_dir = tmp_path / "cdi"
        spec_dir.mkdir()
        (spec_dir / "nvidia.yaml").write_text("cdiVersion: 0.5.0\n")
        env["FAKE_DOCKER_CDI"] = f"{spec_dir} {tmp_path / 'missing'} "
    res = _run(fake_repo, "tests/run_unit_in_docker.sh", [], env)
    assert res.returncode == 0, res.stderr
    argv = fakes.run_call()
    got = [
        a for i, a in enumerate(argv) if a in ("--gpus", "--device") or (i and argv[i - 1] in ("--gpus", "--device"))
    ]
    assert got == expected
    if listing and listing.startswith("GPU") and not expected:
        assert "running without GPUs" in res.stderr


def test_docker_gpus_none_overrides_detection(fake_repo: Path, fakes: Fakes) -> None:
    fakes.gpus("GPU 0: NVIDIA H200 (UUID: GPU-1)")
    env = {**fakes.env, "CONTAINER": "i", "FAKE_DOCKER_RUNTIMES": '{"nvidia":{}}', "DOCKER_GPUS": "none"}
    assert _run(fake_repo, "tests/run_unit_in_docker.sh", [], env).returncode == 0
    assert "--gpus" not in fakes.run_call()


@pytest.mark.parametrize("ci, interactive", [("", True), ("true", False)])
def test_interactive_only_on_a_tty_outside_ci(fake_repo: Path, fakes: Fakes, ci: str, interactive: bool) -> None:
    env = {**fakes.env, "CONTAINER": "i"}
    if ci:
        env["CI"] = ci
    primary, secondary = os.openpty()
    try:
        res = _run(fake_repo, "tests/run_unit_in_docker.sh", [], env, stdin=secondary)
    finally:
        os.close(primary)
        os.close(secondary)
    assert res.returncode == 0, res.stderr
    argv = fakes.run_call()
    assert ("-it" in argv) is interactive
    assert ("CI" in _pairs(argv, "-e")) is bool(ci)


def test_docker_run_args_are_added_before_the_image(fake_repo: Path, fakes: Fakes) -> None:
    env = {**fakes.env, "CONTAINER": "img:1", "DOCKER_RUN_ARGS": "--network host -v /data:/data"}
    assert _run(fake_repo, "tests/run_unit_in_docker.sh", [], env).returncode == 0
    argv = fakes.run_call()
    image_at = argv.index("img:1")
    assert argv[image_at - 4 : image_at] == ["--network", "host", "-v", "/data:/data"]


# ---------------------------------------------------------- run_functional_in_docker.sh


@pytest.mark.parametrize("arg", ["functional/sft.sh", "tests/functional/sft.sh", "./functional/sft.sh"])
def test_functional_runs_the_named_script(fake_repo: Path, fakes: Fakes, arg: str) -> None:
    env = {**fakes.env, "CONTAINER": "img:1"}
    res = _run(fake_repo, "tests/run_functional_in_docker.sh", [arg, "sft.max_num_steps=3"], env)
    assert res.returncode == 0, res.stderr
    argv = fakes.run_call()
    assert argv[argv.index("img:1") + 1 :] == [
        "bash",
        "docker/entrypoint.sh",
        "--prepare-assets",
        "bash",
        "tests/functional/sft.sh",
        "sft.max_num_steps=3",
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "Usage: CONTAINER=<image> bash tests/run_functional_in_docker.sh"),
        (["functional/nope.sh"], "no such test script: tests/functional/nope.sh"),
        (["../../etc/passwd"], "no such test script"),
    ],
)
def test_functional_bad_arguments_exit_2(fake_repo: Path, fakes: Fakes, args: list[str], message: str) -> None:
    res = _run(fake_repo, "tests/run_functional_in_docker.sh", args, {**fakes.env, "CONTAINER": "i"})
    assert res.returncode == 2
    assert message in res.stderr
    assert fakes.calls() == []


def test_functional_takes_an_absolute_path_inside_the_checkout(fake_repo: Path, fakes: Fakes, tmp_path: Path) -> None:
    env = {**fakes.env, "CONTAINER": "img:1"}
    res = subprocess.run(
        [BASH, str(fake_repo / "tests/run_functional_in_docker.sh"), str(fake_repo / "tests/functional/sft.sh"), "a=1"],
        env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    argv = fakes.run_call()
    assert argv[argv.index("img:1") + 1 :] == [
        "bash", "docker/entrypoint.sh", "--prepare-assets", "bash", "tests/functional/sft.sh", "a=1",
    ]  # fmt: skip


def test_functional_refuses_an_absolute_path_outside_the_checkout(
    fake_repo: Path, fakes: Fakes, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere" / "sft.sh"
    outside.parent.mkdir()
    outside.write_text("echo outside\n")
    for arg in (str(outside), str(tmp_path / "no_such_dir" / "x.sh")):
        res = _run(fake_repo, "tests/run_functional_in_docker.sh", [arg], {**fakes.env, "CONTAINER": "i"})
        assert res.returncode == 2
        assert res.stderr.splitlines() == [
            f"error: {arg} is not inside this checkout ({fake_repo.resolve()}): the container sees only the checkout"
        ]
    # inside the checkout but missing: the usual message
    missing = str(fake_repo / "tests" / "functional" / "nope.sh")
    res = _run(fake_repo, "tests/run_functional_in_docker.sh", [missing], {**fakes.env, "CONTAINER": "i"})
    assert res.returncode == 2 and "no such test script: tests/functional/nope.sh" in res.stderr
    assert fakes.calls() == []


def test_functional_without_container_exits_2(fake_repo: Path, fakes: Fakes) -> None:
    res = _run(fake_repo, "tests/run_functional_in_docker.sh", ["functional/sft.sh"], fakes.env)
    assert res.returncode == 2 and "CONTAINER is not set" in res.stderr


def test_functional_exit_code_is_forwarded(fake_repo: Path, fakes: Fakes) -> None:
    env = {**fakes.env, "CONTAINER": "i", "FAKE_DOCKER_RUN_RC": "1"}
    assert _run(fake_repo, "tests/run_functional_in_docker.sh", ["functional/sft.sh"], env).returncode == 1


# ------------------------------------------------------------------------- docker/run.sh


def test_run_sh_runs_any_command_with_the_same_set_up(fake_repo: Path, fakes: Fakes) -> None:
    env = {**fakes.env, "CONTAINER": "img:1", "FAKE_DOCKER_RUN_RC": "4"}
    res = _run(fake_repo, "docker/run.sh", ["pytest", "-n", "2", "tools/py/tests"], env)
    assert res.returncode == 4  # the command's exit status
    argv = fakes.run_call()
    image_at = argv.index("img:1")
    assert argv[image_at + 1 :] == ["bash", "docker/entrypoint.sh", "pytest", "-n", "2", "tools/py/tests"]
    assert f"{fake_repo}:/workspace" in _pairs(argv[:image_at], "-v")


@pytest.mark.parametrize(
    ("env_extra", "message"),
    [({"CONTAINER": "i"}, "Usage: CONTAINER=<image> bash docker/run.sh"), ({}, "CONTAINER is not set")],
)
def test_run_sh_without_a_command_or_an_image_exits_2(
    fake_repo: Path, fakes: Fakes, env_extra: dict[str, str], message: str
) -> None:
    args = [] if env_extra else ["true"]
    res = _run(fake_repo, "docker/run.sh", args, {**fakes.env, **env_extra})
    assert res.returncode == 2 and message in res.stderr
    assert fakes.calls() == []


# ------------------------------------------------------------------------ docker/build.sh

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


@pytest.fixture
def build_env(tmp_path: Path, fake_repo: Path) -> tuple[Fakes, dict[str, str], Path]:
    f = Fakes(tmp_path, minimal_path=False)
    # Pretend to be root and to have debootstrap; the fake makes a tiny "root fs".
    _write_exe(f.bin / "id", f'#!{BASH}\n[ "$1" = -u ] && echo 0 || exec /usr/bin/id "$@"\n')
    _write_exe(
        f.bin / "debootstrap",
        f"#!{BASH}\nprintf '%s\\n' \"$@\" > {tmp_path}/debootstrap.args\n"
        'mkdir -p "$3/etc/apt/sources.list.d" "$3/var/lib/apt/lists"\n'
        "echo 'deb old' > \"$3/etc/apt/sources.list\"\n",
    )
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n")
    env = {**f.env, "NRL_APT_ETC": str(apt), "CA_BUNDLE": str(ca), "UV_VERSION": "0.9.9", "TMPDIR": str(tmp_path)}
    for v in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "DEBIAN_MIRROR",
        "BASE_IMAGE",
        "DOCKER_BUILDER",
    ):
        env.pop(v, None)
    return f, env, apt


def _build_call(f: Fakes) -> dict[str, Any]:
    builds = [c for c in f.calls() if "--tag" in c["argv"]]
    assert len(builds) == 1, f.calls()
    return builds[0]


def test_build_uses_the_base_when_it_can_be_pulled(
    fake_repo: Path, build_env: tuple[Fakes, dict[str, str], Path], tmp_path: Path
) -> None:
    f, env, _ = build_env
    env.update(FAKE_DOCKER_PULL_OK="1", HTTPS_PROXY="http://proxy:3128")
    res = _run(fake_repo, "docker/build.sh", ["--mcore"], env)
    assert res.returncode == 0, res.stderr
    call = _build_call(f)
    argv = call["argv"]
    assert _pairs(argv, "--tag") == ["nemo-rl-test:mcore"]
    build_args = _pairs(argv, "--build-arg")
    assert "BASE_IMAGE=python:3.11-slim-bookworm" in build_args
    assert "UV_EXTRAS=--extra mcore" in build_args and "UV_VERSION=0.9.9" in build_args
    assert "HTTPS_PROXY" in build_args  # by name: the value stays out of the image history
    assert not (tmp_path / "debootstrap.args").exists()
    # Only the lock files and the CA bundle are sent, never the repo (.venv can be GBs).
    context = (f.log.parent / (f.log.name + ".context")).read_text().split()
    assert context == ["Dockerfile", "ca-bundle.crt", "pyproject.toml", "tools", "uv.lock"]


def test_the_build_context_changes_with_the_dependencies_not_with_tool_settings(
    fake_repo: Path, build_env: tuple[Fakes, dict[str, str], Path]
) -> None:
    """The dependency layer's cache key is the context: a pytest or harness setting edited in
    pyproject.toml must not rebuild it (torch is GBs), a dependency edited must."""
    f, env, _ = build_env
    env.update(FAKE_DOCKER_PULL_OK="1")
    sent = f.log.parent / (f.log.name + ".pyproject.toml")

    def context_pyproject() -> str:
        assert _run(fake_repo, "docker/build.sh", [], env).returncode == 0
        return sent.read_text()

    pyproject = fake_repo / "pyproject.toml"
    first = context_pyproject()
    assert "[project]" in first and "[tool.uv.sources]" in first and "[dependency-groups]" in first
    assert "[tool.pytest" not in first and "[tool.testharness" not in first and "[tool.ruff" not in first
    text = pyproject.read_text()
    pyproject.write_text(text.replace('addopts = ["--strict-markers"', 'addopts = ["--strict-markers", "-q"'))
    assert pyproject.read_text() != text
    assert context_pyproject() == first
    pyproject.write_text(text.replace("dependencies = [", 'dependencies = [\n    "six",', 1))
    assert '"six"' in context_pyproject()


@pytest.mark.parametrize(
    "text",
    [
        'project.name = "x"\n[tool.ruff]\nline-length = 99\n',
        '[project]\nname = "x"\n[tool.pytest.ini_options]\ns = """\n[project]\n"""\n',
    ],
    ids=["a-dotted-key-before-any-table", "a-header-inside-a-string"],
)
def test_the_dependency_tables_fall_back_to_the_whole_file_when_not_exact(text: str) -> None:
    sys.path.insert(0, str(REPO / "docker"))
    try:
        from deps_pyproject import dependency_text
    finally:
        sys.path.remove(str(REPO / "docker"))
    assert dependency_text(text) == text


def test_build_without_registry_debootstraps_from_the_apt_mirror(
    fake_repo: Path, build_env: tuple[Fakes, dict[str, str], Path], tmp_path: Path
) -> None:
    f, env, apt = build_env
    (apt / "sources.list.d" / "debian.sources").write_text(DEB822)
    (apt / "sources.list.d" / "other.list").write_text("deb https://packages.example/apt cloud-sdk main\n")
    res = _run(fake_repo, "docker/build.sh", ["--tag", "t:1"], env)
    assert res.returncode == 0, res.stderr
    args = (tmp_path / "debootstrap.args").read_text().split()
    assert args[0] == "--variant=minbase" and args[1] == "bookworm"
    assert args[3] == "http://mirror.example/debian"
    imports = [c["argv"] for c in f.calls() if c["argv"][:1] == ["import"]]
    assert imports and imports[0][-1] == "nemo-rl-base:debian-bookworm"
    # The imported root fs carries the same mirror (and its security suite) for apt.
    import tarfile

    with tarfile.open(str(f.log) + ".import.tar") as tar:
        member = tar.extractfile("./etc/apt/sources.list.d/debian.sources")
        assert member is not None
        sources = member.read().decode()
        assert "./etc/apt/sources.list" not in tar.getnames()
    assert "URIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates" in sources
    assert "URIs: http://mirror.example/debian-security\nSuites: bookworm-security" in sources
    call = _build_call(f)
    assert "BASE_IMAGE=nemo-rl-base:debian-bookworm" in _pairs(call["argv"], "--build-arg")


@pytest.mark.parametrize(
    ("flags", "tag"),
    [(["--python", "3.13"], "nemo-rl-test:py3.13"), (["--python=3.13", "--mcore"], "nemo-rl-test:py3.13-mcore")],
)
def test_build_for_python_3_13_uses_debian_13(
    fake_repo: Path, build_env: tuple[Fakes, dict[str, str], Path], tmp_path: Path, flags: list[str], tag: str
) -> None:
    # Debian 13's own python3 is 3.13: without a registry the base is a trixie debootstrap.
    f, env, apt = build_env
    (apt / "sources.list.d" / "debian.sources").write_text(DEB822)
    res = _run(fake_repo, "docker/build.sh", flags, env)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "debootstrap.args").read_text().split()[1] == "trixie"
    argv = _build_call(f)["argv"]
    assert _pairs(argv, "--tag") == [tag]
    assert {"BASE_IMAGE=nemo-rl-base:debian-trixie", "PYTHON_VERSION=3.13"} <= set(_pairs(argv, "--build-arg"))


@pytest.mark.parametrize(
    ("flags", "tag"),
    [
        (["--ray", "2.46.0"], "nemo-rl-test:ray2.46.0"),
        (["--ray=2.46.0", "--tag", "t:low"], "t:low"),
        (["--ray", "2.46.0", "--xdist", "3.6.1"], "nemo-rl-test:ray2.46.0-xdist3.6.1"),
    ],
)
def test_build_with_a_given_ray_passes_it_to_the_last_layer(
    fake_repo: Path, build_env: tuple[Fakes, dict[str, str], Path], flags: list[str], tag: str
) -> None:
    # CI's Debian 12 image for the harness suite: the low end of the harness's Ray range.
    f, env, _ = build_env
    env.update(FAKE_DOCKER_PULL_OK="1")
    res = _run(fake_repo, "docker/build.sh", flags, env)
    assert res.returncode == 0, res.stderr
    argv = _build_call(f)["argv"]
    assert _pairs(argv, "--tag") == [tag] and "RAY_VERSION=2.46.0" in _pairs(argv, "--build-arg")
    assert ("XDIST_VERSION=3.6.1" in _pairs(argv, "--build-arg")) == ("--xdist" in flags)
    assert _run(fake_repo, "docker/build.sh", [], env).returncode == 0  # without it: no such argument
    last_build = [c["argv"] for c in f.calls() if "--tag" in c["argv"]][-1]
    assert not [a for a in _pairs(last_build, "--build-arg") if a.startswith("RAY_VERSION")]
    bad = _run(fake_repo, "docker/build.sh", ["--ray", "latest"], env)
    assert bad.returncode == 2 and "--ray takes a release number such as 2.46.0, got 'latest'" in bad.stderr
    bad = _run(fake_repo, "docker/build.sh", ["--xdist", "3.x"], env)
    assert bad.returncode == 2 and "--xdist takes a release number such as 3.6.1, got '3.x'" in bad.stderr
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    # declared after every other layer: the image is the same as without it, plus that layer
    assert dockerfile.index("ARG RAY_VERSION") > dockerfile.rindex("uv sync")
    assert dockerfile.index("ARG RAY_VERSION") > dockerfile.rindex("_nrl_workspace.pth")
    assert dockerfile.index("ARG XDIST_VERSION") > dockerfile.index("ARG RAY_VERSION")


def test_build_refuses_a_python_without_a_debian_release(
    fake_repo: Path, build_env: tuple[Fakes, dict[str, str], Path]
) -> None:
    f, env, _ = build_env
    res = _run(fake_repo, "docker/build.sh", ["--python", "3.12"], env)
    assert res.returncode == 2 and "--python must be 3.11 or 3.13" in res.stderr
    assert not [c for c in f.calls() if "--tag" in c["argv"]]


def test_build_reads_one_line_sources_and_skips_disabled_entries(
    fake_repo: Path, build_env: tuple[Fakes, dict[str, str], Path], tmp_path: Path
) -> None:
    f, env, apt = build_env
    (apt / "sources.list.d" / "a-disabled.sources").write_text(
        "Types: deb\nURIs: http://disabled.example/debian\nSuites: bookworm\nEnabled: no\n"
    )
    (apt / "sources.list").write_text(
        "# comment\ndeb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://line.example/debian/ bookworm main # tail\n"
    )
    assert _run(fake_repo, "docker/build.sh", [], env).returncode == 0
    assert (tmp_path / "debootstrap.args").read_text().split()[3] == "http://line.example/debian"


def test_build_without_a_debian_mirror_says_how_to_set_one(
    fake_repo: Path, build_env: tuple[Fakes, dict[str, str], Path], tmp_path: Path
) -> None:
    f, env, apt = build_env
    (apt / "sources.list").write_text("deb http://archive.ubuntu.com/ubuntu jammy main\n")
    res = _run(fake_repo, "docker/build.sh", [], env)
    assert res.returncode == 2
    assert "DEBIAN_MIRROR" in res.stderr and "Traceback" not in res.stderr
    env["DEBIAN_MIRROR"] = "http://override.example/debian"
    assert _run(fake_repo, "docker/build.sh", [], env).returncode == 0
    assert (tmp_path / "debootstrap.args").read_text().split()[3] == "http://override.example/debian"


def test_build_reuses_an_existing_local_base(
    fake_repo: Path, build_env: tuple[Fakes, dict[str, str], Path], tmp_path: Path
) -> None:
    f, env, _ = build_env
    env["FAKE_DOCKER_IMAGES"] = "nemo-rl-base:debian-bookworm"
    assert _run(fake_repo, "docker/build.sh", [], env).returncode == 0
    assert not (tmp_path / "debootstrap.args").exists()
    assert "BASE_IMAGE=nemo-rl-base:debian-bookworm" in _pairs(_build_call(f)["argv"], "--build-arg")


@pytest.mark.parametrize(
    "fake, expect_cmd, expect_mounts",
    [
        ({"FAKE_DOCKER_BUILDX": "1"}, ["buildx", "build", "--load"], True),
        ({"FAKE_DOCKER_BUILDKIT": "1"}, ["build"], True),
        ({}, ["build"], False),
    ],
    ids=["buildx", "buildkit", "legacy"],
)
def test_build_picks_the_best_builder(
    fake_repo: Path,
    build_env: tuple[Fakes, dict[str, str], Path],
    fake: dict[str, str],
    expect_cmd: list[str],
    expect_mounts: bool,
) -> None:
    f, env, _ = build_env
    env.update(fake, FAKE_DOCKER_PULL_OK="1")
    assert _run(fake_repo, "docker/build.sh", [], env).returncode == 0
    call = _build_call(f)
    assert call["argv"][: len(expect_cmd)] == expect_cmd
    dockerfile = (f.log.parent / (f.log.name + ".Dockerfile")).read_text()
    assert ("--mount=type=cache" in dockerfile) is expect_mounts
    assert "uv sync --frozen --group test" in dockerfile  # the legacy rewrite keeps the command


def test_build_rejects_unknown_arguments(fake_repo: Path, build_env: tuple[Fakes, dict[str, str], Path]) -> None:
    f, env, _ = build_env
    res = _run(fake_repo, "docker/build.sh", ["--bogus"], env)
    assert res.returncode == 2 and "unknown argument: --bogus" in res.stderr
    assert not [c for c in f.calls() if "--tag" in c["argv"]]


# -------------------------------------------------------------------- docker/entrypoint.sh


def _entry(ws: Path, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ["PATH"], "NRL_WORKSPACE": str(ws), "NRL_LOCK_SHA_FILE": str(ws / "none"), **env}
    return subprocess.run(
        [BASH, str(REPO / "docker/entrypoint.sh"), *args], env=full, cwd=ws, capture_output=True, text=True, timeout=60
    )


def test_entrypoint_forwards_the_exit_code(tmp_path: Path) -> None:
    assert _entry(tmp_path, ["bash", "-c", "exit 5"]).returncode == 5
    assert _entry(tmp_path, []).returncode == 2


def test_entrypoint_prepares_assets_first_and_stops_if_that_fails(tmp_path: Path) -> None:
    (tmp_path / "tests/unit").mkdir(parents=True)
    (tmp_path / "tests/unit/prepare_unit_test_assets.py").write_text("")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    _write_exe(fake_bin / "python", f'#!{BASH}\necho "$@" >> {tmp_path}/python.log\nexit ${{FAKE_RC:-0}}\n')
    path = f"{fake_bin}:{os.environ['PATH']}"
    res = _entry(tmp_path, ["--prepare-assets", "bash", "-c", "echo ran > ran.txt"], PATH=path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "python.log").read_text().split() == [str(tmp_path / "tests/unit/prepare_unit_test_assets.py")]
    (tmp_path / "ran.txt").unlink()
    res = _entry(tmp_path, ["--prepare-assets", "bash", "-c", "echo ran > ran.txt"], PATH=path, FAKE_RC="1")
    assert res.returncode == 1 and "building the test assets failed" in res.stderr
    assert not (tmp_path / "ran.txt").exists()


def test_entrypoint_warns_when_the_image_was_built_from_another_lock(tmp_path: Path) -> None:
    (tmp_path / "uv.lock").write_text("lock v2\n")
    (tmp_path / "sha").write_text("0" * 64 + "\n")
    res = _entry(tmp_path, ["true"], NRL_LOCK_SHA_FILE=str(tmp_path / "sha"))
    assert res.returncode == 0 and "built from another uv.lock" in res.stderr


def test_entrypoint_uses_the_host_umask_for_a_root_host(tmp_path: Path) -> None:
    res = _entry(tmp_path, ["bash", "-c", "touch made"], HOST_UID="0", HOST_GID="0", HOST_UMASK="0077")
    assert res.returncode == 0, res.stderr
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another uid needs root (as in the container)")
def test_entrypoint_hands_new_files_back_to_the_host_user(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "tests/unit").mkdir(parents=True)
    (ws / ".venv").mkdir()
    old = ws / "old.txt"
    old.write_text("x")
    old.chmod(0o600)
    outside = tmp_path / "outside"
    outside.write_text("x")
    outside.chmod(0o644)
    script = (
        "mkdir -p tests/unit/new/sub && echo r > tests/unit/unit_results.json && "
        f"echo f > tests/unit/new/sub/f && ln -s {outside} tests/unit/new/link && "
        "touch .venv/y old.txt && exit 4"
    )
    res = _entry(ws, ["bash", "-c", script], HOST_UID="4321", HOST_GID="4322", HOST_UMASK="0027")
    assert res.returncode == 4, res.stderr
    for rel, mode in [
        ("tests/unit/unit_results.json", 0o640),
        ("tests/unit/new", 0o750),
        ("tests/unit/new/sub", 0o750),
        ("tests/unit/new/sub/f", 0o640),
    ]:
        st = (ws / rel).stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (4321, 4322, mode), rel
    assert (ws / "tests/unit/new/link").lstat().st_uid == 4321
    # Pre-existing paths, the link's target and the host's .venv are left alone.
    for path, mode in [(old, 0o600), (ws / "tests/unit", None), (ws, None), (outside, 0o644)]:
        st = path.stat()
        assert st.st_uid == 0, path
        if mode is not None:
            assert stat.S_IMODE(st.st_mode) == mode, path
    assert (ws / ".venv/y").stat().st_uid == 0


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the real docker client on PATH")
@pytest.mark.parametrize("script", ["tests/run_unit_in_docker.sh", "tests/run_functional_in_docker.sh"])
def test_no_docker_daemon_is_one_clear_line(script: str) -> None:
    # The real docker client, pointed at a socket nobody serves: what a stopped daemon looks like.
    env = {**os.environ, "CONTAINER": "img:1", "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    res = subprocess.run(
        [BASH, str(REPO / script), "functional/sft.sh"], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2
    assert res.stderr.startswith("error: no Docker daemon answers (")
    assert len(res.stderr.strip().splitlines()) == 1
