"""Mechanistic probes: where a model's answer comes from, inside the network.

Every probe takes `(model, tokenizer, examples, cfg)` and returns records (dicts):

* `knockout` — attention-edge knockout from the last position (Geva et al. 2023);
* `sublayer` — zero MLP / attention outputs at chosen positions in a window of layers;
* `project` — vocabulary projection: attribute extraction rate and attributes rate;
* `attention` — attention mass from the answer position to the context.
"""

from knowflow.probes.examples import ProbeExample, builtin_facts, load_examples
from knowflow.probes.knockout import KnockoutConfig, knockout, summarize_knockout
from knowflow.probes.mass import AttentionMassConfig, attention_mass, mean_attention_mass
from knowflow.probes.projection import ProjectionConfig, projection, summarize_projection
from knowflow.probes.sublayer import SublayerConfig, sublayer_knockout, summarize_sublayer

# name -> (probe function, config class, summary function)
PROBES = {
    "knockout": (knockout, KnockoutConfig, summarize_knockout),
    "sublayer": (sublayer_knockout, SublayerConfig, summarize_sublayer),
    "project": (projection, ProjectionConfig, summarize_projection),
    "attention": (attention_mass, AttentionMassConfig, None),
}

__all__ = ["PROBES", "AttentionMassConfig", "KnockoutConfig", "ProbeExample",
           "ProjectionConfig", "SublayerConfig", "attention_mass", "builtin_facts", "knockout",
           "load_examples", "mean_attention_mass", "projection", "sublayer_knockout",
           "summarize_knockout", "summarize_projection", "summarize_sublayer"]
