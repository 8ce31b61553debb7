"""Package metadata for alf: a PyTorch RL library with method-level DDP."""
from setuptools import find_packages, setup

setup(
    name="alf",
    version="0.1.0",
    description="Reinforcement-learning algorithms with method-level "
    "distributed data-parallel training",
    python_requires=">=3.10",
    packages=find_packages(include=["alf", "alf.*"]),
    package_data={"alf": ["examples/*.gin"]},
    install_requires=[
        "torch>=2.4,<3",
        "gin-config>=0.5",
        "absl-py>=1.0",
        "gymnasium>=1.1,<2",
        "numpy>=1.24",
        "optree>=0.11",
        "tensorboard>=2.12",
        "matplotlib>=3.5",
    ],
    extras_require={
        "metadrive": ["metadrive-simulator>=0.4.2"],
        "test": ["pytest>=7", "pytest-timeout>=2"],
        "bench": ["stable-baselines3>=2.3"],
        # alf.bin.play --record_file: frames of gymnasium's classic
        # control (pygame), GIF (Pillow), MP4 (imageio's ffmpeg, ~70 MB).
        "video": ["pillow>=9", "pygame>=2.1", "imageio>=2.20",
                  "imageio-ffmpeg>=0.4"],
    },
    entry_points={"console_scripts": ["alf-train=alf.bin.train:run_main"]},
)
