"""Representative interpretations of convolutional neural networks."""
