"""The models: a frozen Hugging Face target that verifies trees, and the block drafters.

``TargetModel`` (``target.py``) wraps a causal LM for prefill, one tree-verification forward and
cache compaction; hybrid Gated DeltaNet targets go through ``hybrid.py``; ``kv.py`` is the one
in-place key/value buffer. ``drafter.py`` holds the DFlash-format block drafter and the MFD mixture
drafter, ``domino.py`` the Domino (DARTree) drafter, ``protocol.py`` what decoding needs of any
drafter, ``fingerprint.py`` which target a drafter belongs to. Nothing here decodes or trains.
"""

from mfd_theory.llm.models.domino import DominoDrafter, domino_from_checkpoint, grow_path_tree
from mfd_theory.llm.models.drafter import (DRAFTER_KINDS, BatchDraftContext, BlockDrafter, MFDDrafter, build_drafter,
                                           check_drafter_target, default_target_layer_ids,
                                           drafter_from_checkpoint, load_drafter)
from mfd_theory.llm.models.fingerprint import FINGERPRINT_VERSION, hf_model, target_fingerprint
from mfd_theory.llm.models.hybrid import GDN_COMMIT, HYBRID_ARCHITECTURES, HybridTree, gdn_state_bytes
from mfd_theory.llm.models.kv import KVBuffer
from mfd_theory.llm.models.protocol import BatchContext, Drafter, DrafterBase, SequentialBatch
from mfd_theory.llm.models.target import TargetModel, VerifyOutput, tree_attention_mask

__all__ = ["BatchContext", "BatchDraftContext", "BlockDrafter", "DRAFTER_KINDS", "DominoDrafter", "Drafter",
           "DrafterBase", "FINGERPRINT_VERSION", "GDN_COMMIT", "HYBRID_ARCHITECTURES", "HybridTree", "KVBuffer",
           "MFDDrafter", "SequentialBatch", "TargetModel", "VerifyOutput", "build_drafter",
           "check_drafter_target", "default_target_layer_ids", "domino_from_checkpoint", "drafter_from_checkpoint",
           "gdn_state_bytes", "grow_path_tree", "hf_model", "load_drafter", "target_fingerprint",
           "tree_attention_mask"]
