"""clover2: Clover-2 draft models and an exactly lossless tree speculative decoder."""
