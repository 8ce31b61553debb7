"""An environment module that cannot be imported without its extra, as
gymnasium's Box2D ones (``LunarLander-v3``) cannot without Box2D."""
import gymnasium as gym

raise gym.error.DependencyNotInstalled(
    "Box2D is not installed, run `pip install \"gymnasium[box2d]\"`")
