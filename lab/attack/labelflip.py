"""Label flip: a Byzantine worker trains on wrong labels, y -> C - 1 - y, and sends the honest
gradient of that poisoned batch (a data-poisoning attack; e.g. Allen-Zhu et al. 2021, and the
"label flipping" baseline of Karimireddy et al., ICML 2021). Classification data only."""
from __future__ import annotations

from .base import Attack, register


@register("labelflip")
class LabelFlip(Attack):
    name = "labelflip"

    def __init__(self, engine, byzantine):
        super().__init__(engine, byzantine)
        if engine.data.task != "classify":
            raise ValueError(f"labelflip needs a classification dataset, got data="
                             f"{engine.cfg.data!r} (task {engine.data.task!r})")
        self.classes = engine.data.num_outputs

    @classmethod
    def check_config(cls, cfg):
        """Before launch, with the config: the data set is a classification one."""
        from .. import data
        if data.task_of(cfg.data) != "classify":
            kinds = ", ".join(n for n in data.names() if data.task_of(n) == "classify")
            raise ValueError(f"attack='labelflip' needs a classification dataset "
                             f"({kinds}), got data={cfg.data!r}")

    def on_batch(self, x, y, step):
        return (x, self.classes - 1 - y) if self.byzantine else (x, y)
