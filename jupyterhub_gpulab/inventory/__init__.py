"""GPU inventory: devices and slices, from NVML or from configuration."""

from .model import Device, Inventory, SharedSettings, Slice, SliceKind, SliceRequest

__all__ = ["Device", "Inventory", "SharedSettings", "Slice", "SliceKind", "SliceRequest"]
