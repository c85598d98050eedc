"""Fleet simulator: RocketMQ store files with ground truth."""
