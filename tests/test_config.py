"""Tests of alf/config.py: gin-file lookup and config parsing errors."""
import logging
import os
import re

import gin
import pytest

import alf.config
import alf.trainers
from alf.config import examples_dir, find_gin_file
from alf.trainers import parse_config
from alf.utils.errors import ConfigError

EXAMPLE = "ppo_cart_pole.gin"


@pytest.fixture(autouse=True)
def clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


# ---- find_gin_file ----------------------------------------------------------
def test_find_absolute_path(tmp_path):
    f = tmp_path / "mine.gin"
    f.write_text("")
    assert find_gin_file(str(f)) == str(f)


def test_find_relative_path(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mine.gin").write_text("")
    monkeypatch.chdir(tmp_path)
    found = find_gin_file(os.path.join("sub", "mine.gin"))
    assert os.path.isabs(found)
    assert found == str(tmp_path / "sub" / "mine.gin")


def test_find_bare_name_in_cwd_before_packaged_example(tmp_path, monkeypatch):
    local = tmp_path / EXAMPLE
    local.write_text("# a local copy that shadows the packaged example\n")
    monkeypatch.chdir(tmp_path)
    assert find_gin_file(EXAMPLE) == str(local)


def test_find_packaged_example_by_bare_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no local copy here
    found = find_gin_file(EXAMPLE)
    assert found == os.path.join(examples_dir(), EXAMPLE)
    assert os.path.isfile(found)
    assert os.path.dirname(found) == os.path.join(
        os.path.dirname(os.path.abspath(alf.config.__file__)), "examples")


def test_missing_file_names_file_and_every_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        find_gin_file("no_such_config.gin")
    msg = str(info.value)
    assert "no_such_config.gin" in msg
    assert str(tmp_path) in msg  # the current directory
    assert examples_dir() in msg  # the packaged examples
    assert "\n" not in msg


def test_missing_absolute_file_names_it(tmp_path):
    missing = tmp_path / "nowhere" / "x.gin"
    with pytest.raises(ConfigError, match="x.gin") as info:
        find_gin_file(str(missing))
    assert str(missing) in str(info.value)


# ---- parse_config -----------------------------------------------------------
def test_unknown_parameter_binding():
    with pytest.raises(ConfigError) as info:
        parse_config([EXAMPLE], ["TrainerConfig.num_envz=3"])
    msg = str(info.value)
    assert "num_envz" in msg
    assert "\n" not in msg


def test_typo_in_configurable_name():
    with pytest.raises(ConfigError) as info:
        parse_config([EXAMPLE], ["TrainerConfg.num_envs=3"])
    msg = str(info.value)
    assert "TrainerConfg" in msg and msg.endswith("did you mean "
                                                  "TrainerConfig?")
    assert "\n" not in msg


def test_unknown_configurable_says_how_ones_own_becomes_known():
    with pytest.raises(ConfigError) as info:
        parse_config([EXAMPLE], ["TrainerConfig.algorithm_ctor=@MyAC"])
    assert str(info.value).endswith(
        "must be decorated with @alf.configurable, and the gin file must "
        "import its module (a line `import mypackage.mymodule`)")


@pytest.mark.parametrize("binding", [
    "TrainerConfig.algorithm_ctor=@PPOAlgorithm()",
    "TrainerConfig.env_load_fn=@suite_gym.load()"])
def test_a_called_reference_where_the_trainer_calls_is_one_line(binding):
    """Before, gin called it without arguments when the config was built:
    a 40-line traceback."""
    name, value = binding.split("=")
    with pytest.raises(ConfigError, match=re.escape(
            f"{name} = {value}; bind {value[:-2]} itself, without ()")):
        parse_config([EXAMPLE], [binding])


def test_a_macro_where_the_trainer_calls_is_what_it_stands_for():
    """`ALG = @PPOAlgorithm` then `algorithm_ctor = %ALG` is a reference,
    not a call: it was refused as `@X()`, naming '%A'."""
    parse_config([EXAMPLE], ["ALG = @PPOAlgorithm", "OTHER = %ALG",
                             "TrainerConfig.algorithm_ctor = %OTHER"])
    from alf.algorithms.ppo_algorithm import PPOAlgorithm
    assert gin.query_parameter("TrainerConfig.algorithm_ctor") is not None
    assert alf.trainers.TrainerConfig().algorithm_ctor is PPOAlgorithm
    with pytest.raises(ConfigError, match=re.escape(
            "TrainerConfig.algorithm_ctor = %CALLED (@PPOAlgorithm()); bind "
            "@PPOAlgorithm "
            "itself, without ()")):
        parse_config([EXAMPLE], ["CALLED = @PPOAlgorithm()",
                                 "TrainerConfig.algorithm_ctor = %CALLED"])


@pytest.mark.parametrize("code, raised", [
    ("y = undefined_name + 1\n", NameError),
    ("import no_such_package_z\n", ImportError),
    ("import alf\nalf.data_distributed_when(True)\n", TypeError),
])
def test_a_bug_in_an_imported_module_keeps_its_traceback(
        tmp_path, monkeypatch, code, raised):
    """Not bad configuration: one line would drop the user's file and
    line, which the traceback shows."""
    (tmp_path / "buggy_user_module.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(raised) as info:
        parse_config([EXAMPLE], ["import buggy_user_module"])
    assert not isinstance(info.value, ConfigError)
    files = [f.path for f in info.traceback]
    assert tmp_path / "buggy_user_module.py" in files, files


@pytest.mark.parametrize("binding", ['TrainerConfig.num_envs=(1',
                                     'TrainerConfig.env_name="""x',
                                     "TrainerConfig.num_envs=[1,"])
def test_unclosed_bracket_or_quote_names_the_binding(binding):
    with pytest.raises(ConfigError) as info:
        parse_config([EXAMPLE], ["TrainerConfig.seed=1", binding])
    msg = str(info.value)
    assert repr(binding) in msg and "not closed" in msg, msg
    assert "\n" not in msg


def test_unknown_binding_inside_a_file_names_file_and_line(tmp_path):
    f = tmp_path / "bad.gin"
    f.write_text("TrainerConfig.num_envs = 2\nTrainerConfig.num_envz = 3\n")
    with pytest.raises(ConfigError) as info:
        parse_config([str(f)])
    msg = str(info.value)
    assert "num_envz" in msg and str(f) in msg and "line 2" in msg
    assert "\n" not in msg


def test_missing_gin_file_in_parse_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="missing_file.gin"):
        parse_config(["missing_file.gin"])


def test_param_overrides_file_value():
    paths = parse_config([EXAMPLE])
    assert paths == [os.path.join(examples_dir(), EXAMPLE)]
    assert gin.query_parameter("TrainerConfig.num_envs") == 8
    parse_config([EXAMPLE], ["TrainerConfig.num_envs=3",
                             'TrainerConfig.env_name="Pendulum-v1"'])
    assert gin.query_parameter("TrainerConfig.num_envs") == 3
    assert gin.query_parameter("TrainerConfig.env_name") == "Pendulum-v1"
    # Values the params did not touch keep the file's.
    assert gin.query_parameter("TrainerConfig.unroll_length") == 32


def test_parse_config_clears_earlier_bindings():
    parse_config([EXAMPLE], ["TrainerConfig.num_envs=3"])
    parse_config([EXAMPLE])
    assert gin.query_parameter("TrainerConfig.num_envs") == 8


# ---- every parse error is one line naming where it is (issue 11) ------------
def test_import_of_missing_module_in_a_file_names_file_and_line(tmp_path):
    f = tmp_path / "imports.gin"
    f.write_text(f"include '{EXAMPLE}'\nimport no_such_module_x\n")
    with pytest.raises(ConfigError) as info:
        parse_config([str(f)])
    msg = str(info.value)
    assert "no_such_module_x" in msg and str(f) in msg and "line 2" in msg
    assert "\n" not in msg


def test_import_of_missing_module_in_a_binding():
    with pytest.raises(ConfigError, match="no_such_module_y") as info:
        parse_config([EXAMPLE], ["import no_such_module_y"])
    assert "\n" not in str(info.value)


def test_missing_include_names_it_the_file_and_the_folders(tmp_path):
    f = tmp_path / "top.gin"
    f.write_text("include 'no_such_include.gin'\n")
    with pytest.raises(ConfigError) as info:
        parse_config([str(f)])
    msg = str(info.value)
    assert "'no_such_include.gin' not found" in msg and str(f) in msg
    assert examples_dir() in msg and str(tmp_path) in msg
    assert "\n" not in msg


@pytest.mark.parametrize("bad", ["TrainerConfig.num_envs",
                                 "TrainerConfig.num_envs=3 4",
                                 "TrainerConfig..num_envs=3",
                                 "TrainerConfig.num_envs=lambda: 3"])
def test_syntax_error_names_the_binding_among_several(bad):
    with pytest.raises(ConfigError) as info:
        parse_config([EXAMPLE], ["TrainerConfig.seed=1", bad,
                                 "TrainerConfig.num_envs=2"])
    msg = str(info.value)
    assert f"--gin_param {bad!r}" in msg, msg
    assert "\n" not in msg


def test_syntax_error_in_a_file_names_file_line_and_text(tmp_path):
    f = tmp_path / "bad_line.gin"
    f.write_text("TrainerConfig.seed = 1\nTrainerConfig.num_envs 3\n")
    with pytest.raises(ConfigError) as info:
        parse_config([str(f)])
    msg = str(info.value)
    assert f"{f}, line 2: TrainerConfig.num_envs 3" in msg, msg


@pytest.mark.parametrize("binding, said", [
    ('PPOAlgorithm.normalize_observations="no"',
     "PPOAlgorithm.normalize_observations='no'; valid: True or False"),
    ("DQNAlgorithm.double_dqn=0",
     "DQNAlgorithm.double_dqn=0; valid: True or False"),
    ('eval/ActorDistributionNetwork.squash="False"',
     "eval/ActorDistributionNetwork.squash='False'; valid: True or False")])
def test_a_switch_bound_to_anything_but_a_bool_is_refused(binding, said):
    """``"no"`` read as true: normalisation ran where it was turned off."""
    with pytest.raises(ConfigError) as info:
        parse_config([EXAMPLE], [binding])
    assert str(info.value) == said


def test_a_switch_bound_to_a_bool_or_a_macro_is_taken():
    parse_config([EXAMPLE], ["PPOAlgorithm.normalize_observations=True",
                             "ON=True", "PPOAlgorithm.normalize_advantages=%ON",
                             "make_ddp_performer.find_unused_parameters=True"])


def test_a_gin_file_that_is_not_utf8_is_named(tmp_path):
    """The error named the codec and the byte, not the file."""
    good, bad = tmp_path / "good.gin", tmp_path / "bad.gin"
    good.write_text("TrainerConfig.num_envs = 2\n")
    # Latin-1, past the 8 kB that gin reads at a time
    bad.write_bytes(b"TrainerConfig.seed = 1\n" + b"#" * 9999 +
                    b"\n# caf\xe9\n")
    with pytest.raises(ConfigError) as info:
        parse_config([str(good), str(bad)])
    assert str(info.value) == (
        f"bad gin configuration: {bad} is not UTF-8 text (invalid "
        "continuation byte at byte 10028); a gin file is UTF-8 text")


def test_undefined_macro_names_binding_and_macro():
    with pytest.raises(ConfigError) as info:
        parse_config([EXAMPLE], ["TrainerConfig.num_envs=%NUM_ENVS"])
    msg = str(info.value)
    assert "TrainerConfig.num_envs" in msg and "%NUM_ENVS" in msg, msg
    parse_config([EXAMPLE], ["NUM_ENVS=3", "TrainerConfig.num_envs=%NUM_ENVS"])
    assert gin.query_parameter("%NUM_ENVS") == 3


def test_unknown_parameter_suggests_close_names():
    with pytest.raises(ConfigError, match="did you mean learning_rate"):
        parse_config([EXAMPLE], ["PPOAlgorithm.learning_rat=1e-3"])


def test_include_found_on_the_search_path_logs_no_error(caplog):
    caplog.set_level(logging.INFO)
    parse_config(["ppg_cart_pole.gin"])  # include 'ppo_cart_pole.gin'
    assert gin.query_parameter("TrainerConfig.unroll_length") == 32
    logged = [r.getMessage() for r in caplog.records]
    assert not [m for m in logged if "Path not found" in m
                or "system_path_file_exists" in m], logged
    logging.getLogger("other").error("Path not found: elsewhere")
    assert "Path not found: elsewhere" in caplog.text  # others still log


@pytest.mark.parametrize("value", ["'yes'", "1", "None"])
def test_an_invalid_choice_is_refused_at_parse_time(value):
    with pytest.raises(ConfigError, match="find_unused_parameters = .*"
                       "expected one of True, False, 'auto'"):
        alf.trainers.parse_config(["ppo_cart_pole.gin"], [
            f"make_ddp_performer.find_unused_parameters = {value}"])


@pytest.mark.parametrize("value", ["True", "False", "'auto'"])
def test_valid_choices_parse(value):
    alf.trainers.parse_config(["ppo_cart_pole.gin"], [
        f"make_ddp_performer.find_unused_parameters = {value}"])


# ---- saved configs ------------------------------------------------------------
def test_older_runs_bare_load_selectors_are_qualified():
    """A gymnasium run saved before suite_metadrive was always registered
    spells its loader ``load``: read back, that means suite_gym's."""
    from alf.config import qualify_saved_selectors
    old = ("load.clip_action = True\n"
           "eval/load.max_episode_steps = 200\n"
           "TrainerConfig.env_load_fn = @load\n"
           "TrainerConfig.held_out_env_load_fn = @held_out/load\n"
           "suite_metadrive.load.horizon = 1000\n"
           "held_out/suite_metadrive.load.num_scenarios = 200\n"
           "TrainerConfig.eval_fn = @suite_gym.load\n"
           "reload.x = 1\n")
    assert qualify_saved_selectors(old) == (
        "suite_gym.load.clip_action = True\n"
        "eval/suite_gym.load.max_episode_steps = 200\n"
        "TrainerConfig.env_load_fn = @suite_gym.load\n"
        "TrainerConfig.held_out_env_load_fn = @held_out/suite_gym.load\n"
        "suite_metadrive.load.horizon = 1000\n"
        "held_out/suite_metadrive.load.num_scenarios = 200\n"
        "TrainerConfig.eval_fn = @suite_gym.load\n"
        "reload.x = 1\n")
    new = qualify_saved_selectors(old)
    assert qualify_saved_selectors(new) == new


def test_a_saved_gymnasium_config_parses_with_metadrive_registered(tmp_path):
    """Where suite_metadrive's ``load`` is registered too (a script that
    imports it), a gymnasium run's bare ``load`` would be ambiguous
    without qualifying."""
    import alf.environments.suite_metadrive  # noqa: F401
    from alf.trainers.config_parser import parse_run_config
    from alf.trainers.trainer_config import TrainerConfig
    path = tmp_path / "config.gin"
    path.write_text("load.max_episode_steps = 77\n"
                    "TrainerConfig.env_name = 'CartPole-v1'\n"
                    "TrainerConfig.algorithm_ctor = @PPOAlgorithm\n")
    with pytest.raises(ConfigError, match="Ambiguous selector .load."):
        parse_config([str(path)])
    parse_run_config(str(path), ["TrainerConfig.seed = 5"])
    cfg = TrainerConfig()
    assert cfg.seed == 5 and cfg.env_name == "CartPole-v1"
    assert gin.query_parameter("suite_gym.load.max_episode_steps") == 77


def test_a_mistake_in_a_saved_config_names_the_file_and_its_line(tmp_path):
    """A gymnasium run's config (rewritten, for its bare ``load``) was
    parsed as a --gin_param: a mistake in it was blamed on --gin_param,
    quoting the whole file, and a --gin_param's own line counted the
    file's lines."""
    from alf.trainers.config_parser import parse_run_config
    path = tmp_path / "config.gin"
    good = ("load.max_episode_steps = 77\n"
            "TrainerConfig.env_name = 'CartPole-v1'\n")
    path.write_text(good + "TrainerConfig.seed 5\n")
    with pytest.raises(ConfigError) as info:
        parse_run_config(str(path))
    said = str(info.value)
    assert str(path) in said and "line 3" in said, said
    assert "--gin_param" not in said and len(said) < 300, said
    path.write_text(good)
    with pytest.raises(ConfigError) as info:
        parse_run_config(str(path), ["TrainerConfig.seed = 5", "x = ("])
    assert "--gin_param 'x = ('" in str(info.value), str(info.value)
    path.write_bytes(good.encode() + b"TrainerConfig.seed = \xff\n")
    with pytest.raises(ConfigError, match=re.escape(
            f"{path} is not a gin file: it is not UTF-8 text (byte 88)")):
        parse_run_config(str(path))
