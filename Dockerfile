# syntax=docker/dockerfile:1
#
# The stage as a container: a static Go binary on distroless.
#
#   docker build -t dp-stage .
#   docker run --rm -v "$PWD/deploy/stage.yaml:/etc/stage/config.yaml:ro" dp-stage
#
# The default command is `/stage run --config /etc/stage/config.yaml`; the
# same image runs the demo producer with
# `generate --config /etc/stage/config.yaml` as its command (see
# docker-compose.yml). `/stage health --config /etc/stage/config.yaml
# [--ready]` asks the running stage's /healthz (/readyz) and exits 0 or 1: the
# compose file's health check (there is no shell or curl in this image). It
# is not a HEALTHCHECK here because the producer runs the same image without
# an HTTP server. .dockerignore keeps .git and state out of the context.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that source edits do not refetch them.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The context has no .git, so the build cannot read its revision: pass the
# version and commit `stage version` and dpstage_build_info report, e.g.
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#                --build-arg REVISION=$(git rev-parse HEAD) -t dp-stage .
ARG VERSION=""
ARG REVISION=""
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags="-s -w -X github.com/dpstage/stage/internal/lib/buildinfo.version=${VERSION} -X github.com/dpstage/stage/internal/lib/buildinfo.revision=${REVISION}" \
      -o /out/stage ./cmd/stage \
    && mkdir -p /out/state

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/stage /stage
# A default configuration (the compose file mounts deploy/stage.yaml over it).
COPY deploy/stage.yaml /etc/stage/config.yaml
# state.dir in deploy/stage.yaml: the budget ledger and release log. Mount a
# volume here to keep them across container restarts.
COPY --from=build --chown=65532:65532 /out/state /var/lib/stage
USER 65532:65532
WORKDIR /var/lib/stage
ENTRYPOINT ["/stage"]
CMD ["run", "--config", "/etc/stage/config.yaml"]
