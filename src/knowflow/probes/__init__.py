"""Mechanistic probes: where a model's answer comes from, inside the network.

Every probe takes `(model, tokenizer, examples, cfg)` and returns records (dicts):

* `knockout` — attention-edge knockout from the last position (Geva et al. 2023);
* `sublayer` — zero MLP / attention outputs at chosen positions in a window of layers;
* `project` — vocabulary projection: attribute extraction rate and attributes rate;
* `attention` — attention mass from the answer position to the context;
* `heads` — per-head causal effect on log p(cf) - log p(parametric) (context vs memory heads);
* `head-project` — vocabulary projection of each attention head (head-level extraction rate).

Activations are addressed by named hook points (`blocks.{l}.attn.out`, `blocks.{l}.mlp.out`,
`blocks.{l}.resid_post`; lens.hooks); knockout and sublayer share one sweep (probes.sweep).
`PROBES` maps each name to its function, config class and summary; `knowflow.probe(model,
data, kind=name, **fields)` (knowflow.api) runs one by name.
"""

from knowflow.probes.examples import ProbeExample, as_example, builtin_facts, load_examples
from knowflow.probes.head_projection import (
    HeadProjectionConfig,
    head_projection,
    summarize_head_projection,
)
from knowflow.probes.heads import HeadsConfig, heads, summarize_heads
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
    "heads": (heads, HeadsConfig, summarize_heads),
    "head-project": (head_projection, HeadProjectionConfig, summarize_head_projection),
}
# probes whose examples are knowledge-conflict items (data.facts.ConflictItem), not prompts
ON_CONFLICT_ITEMS = frozenset({"heads"})


__all__ = ["PROBES", "AttentionMassConfig", "HeadProjectionConfig", "HeadsConfig",
           "KnockoutConfig", "ProbeExample", "ProjectionConfig", "SublayerConfig",
           "as_example", "attention_mass", "builtin_facts", "head_projection", "heads", "knockout",
           "load_examples", "mean_attention_mass", "projection", "sublayer_knockout",
           "summarize_head_projection", "summarize_heads", "summarize_knockout",
           "summarize_projection", "summarize_sublayer"]
