"""The local run (`python -m devkit.local`): the pipeline on one machine, the local analogue
of the cluster deployment (one process per pod, one state directory per PVC)."""
