# karpy's image: one entrypoint (`karpy`) for the controller, the webhook and the extender.
#
#   docker build -t REGISTRY/karpy:TAG .                    # core + boto3 (the AWS provider)
#   docker build --build-arg EXTRAS=core -t REGISTRY/karpy-webhook:TAG .   # core only (webhook, fake provider)
#
# Runs as 65532:65532 on a read-only root filesystem; everything it writes goes to /tmp (gunicorn's
# heartbeats, the Prometheus multiprocess directory, the client's temporary files), which the
# manifests mount as an emptyDir.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY . .
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
# pip extras to install beside the core: aws, plot, all, or core (nothing more)
ARG EXTRAS=aws
ENV VIRTUAL_ENV=/opt/karpy \
    PATH=/opt/karpy/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
COPY --from=build /wheels /wheels
RUN python -m venv "$VIRTUAL_ENV" \
 && wheel="$(ls /wheels/karpy-*.whl)" \
 && if [ "$EXTRAS" = core ]; then spec="$wheel"; else spec="karpy[$EXTRAS] @ file://$wheel"; fi \
 && "$VIRTUAL_ENV/bin/pip" install --no-cache-dir --disable-pip-version-check "$spec" \
 && rm -rf /wheels \
 && karpy --help > /dev/null
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["karpy"]
CMD ["--help"]
