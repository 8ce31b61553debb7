"""Registers ``alf_test/NeedsExtra-v0``, an environment whose constructor
fails as gymnasium's Box2D ones do without their extra installed."""
import gymnasium as gym


class NeedsExtra(gym.Env):

    def __init__(self):
        raise gym.error.DependencyNotInstalled(
            "Box2D is not installed, run `pip install \"gymnasium[box2d]\"`")


if "alf_test/NeedsExtra-v0" not in gym.registry:
    gym.register("alf_test/NeedsExtra-v0", entry_point=NeedsExtra)
