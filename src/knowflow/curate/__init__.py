"""Data curation: context-criticality scores, filtering, counterfactual augmentation."""
