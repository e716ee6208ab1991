#!/bin/sh
# /usr/bin/medseg: the bundle in /opt/medseg (the app, and every command: medseg --help).
# No ONNX Runtime telemetry (the app sets it too, before ONNX Runtime can be imported).
ORT_DISABLE_TELEMETRY="${ORT_DISABLE_TELEMETRY:-1}" exec /opt/medseg/medseg "$@"
