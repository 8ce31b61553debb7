"""Networks: MLP encoders, actor (policy) and value networks."""
from alf.networks.encoding import EncodingNetwork  # noqa: F401
from alf.networks.actor import ActorDistributionNetwork  # noqa: F401
from alf.networks.value import ValueNetwork  # noqa: F401
from alf.networks.policy_value import DisjointPolicyValueNetwork  # noqa: F401
