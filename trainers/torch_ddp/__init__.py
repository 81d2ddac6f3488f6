"""Bundled PyTorch trainer (DDP / FSDP2); run as `python -m trainers.torch_ddp`."""
