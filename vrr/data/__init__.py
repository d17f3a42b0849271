"""The data contract (one ``.npz`` per setting) and the simulator that writes it from the noise model."""
from .contract import ALL_FIELDS, DataContractError, Setting, load_setting, save_setting, validate  # noqa: F401
from .simulate import perturbation_schedule, simulate_from_config, simulate_setting  # noqa: F401
