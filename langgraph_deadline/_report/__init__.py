"""The trace report: step statistics, suggested caps, a waterfall plot."""
