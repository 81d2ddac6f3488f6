"""Prices and quota ids for the offline plan: `trainstack.components.catalog.prices`, where
they moved so the compute components can count their own cost and quota (`facts`), read here
under their old name."""

from trainstack.components.catalog import prices as _prices
from trainstack.components.catalog.prices import *  # the same names, re-exported

__all__ = list(_prices.__all__)
