"""The Train & Export tab: dataset, training run with live curves, export and comparison."""
