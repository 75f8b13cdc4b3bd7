from entrypoint.gpu_check.cli import run

run()
