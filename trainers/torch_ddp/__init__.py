"""Bundled PyTorch trainer (DDP / FSDP2); run as `python -m trainstack.trainers.torch_ddp`."""
