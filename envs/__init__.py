"""The world model and the Gymnasium environments; importing it registers ``recourse/SetCover-v0``
and ``recourse/Sequential-v0``."""

from gymnasium.envs.registration import register, registry

from envs.capability import CapabilityWorld
from envs.recourse import Recourse
from envs.sequential import SequentialWorld
from envs.setcover_env import SetCoverEnv

__all__ = ["CapabilityWorld", "Recourse", "SequentialWorld", "SetCoverEnv"]

if "recourse/SetCover-v0" not in registry:
    register(id="recourse/SetCover-v0", entry_point="envs.setcover_env:SetCoverEnv")

if "recourse/Sequential-v0" not in registry:
    register(id="recourse/Sequential-v0", entry_point="envs.sequential_env:SequentialEnv")
