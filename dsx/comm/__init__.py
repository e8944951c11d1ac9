"""Communication between ranks: measured in every `dsx run` row, predicted by `dsx estimate`.

    logger   the comms_logger block dsx adds to the config its ranks get (not to configs `dsx config` emits)
    volume   what "bytes" means: DeepSpeed's logged message sizes turned into the ZeRO paper's data volume, and
             the ranks' counts gathered into the row's `comm` (RunRow.comm)
    predict  the volume a ZeRO stage (and ZeRO++) should move per optimizer step, from the config and the model

The rank side is dsx.rank.comms (it reads DeepSpeed's logger over the warm-up steps after the first, or a 1-bit
run's timed steps). Nothing here imports torch.
"""

from dsx.comm.logger import LOGGER_BLOCK, rank_config
from dsx.comm.predict import CommPrediction, ParamFacts, param_facts, predict
from dsx.comm.volume import VOLUME_FACTORS, comm_of, volume_bytes

__all__ = ["LOGGER_BLOCK", "rank_config", "CommPrediction", "ParamFacts", "param_facts", "predict", "VOLUME_FACTORS", "comm_of", "volume_bytes"]
