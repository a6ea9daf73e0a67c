# berth's images for a registry pipeline (.github/workflows/release.yaml builds both targets
# for linux/amd64 and linux/arm64 with docker buildx). Offline and without Docker, `make image`
# builds the same two images as archives (hack/image).
#
#   docker buildx build --target berth       -t ghcr.io/berth-dev/berth:$VERSION .
#   docker buildx build --target berth-agent -t ghcr.io/berth-dev/berth-agent:$VERSION .
#
# berth:       static (CGO_ENABLED=0) on distroless/static: controller, scaler, doctor,
#              nodepools, simulate… — everything but the agent.
# berth-agent: cgo (the go-nvml binding) on distroless/base (glibc). NVML itself is not in the
#              image: the NVIDIA container toolkit mounts libnvidia-ml.so.1 and the device nodes
#              into the container (the chart sets NVIDIA_VISIBLE_DEVICES=all).

ARG GO_VERSION=1.27.3

# The static binary cross-compiles on the build machine's platform.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH VERSION=dev COMMIT=unknown
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X github.com/berth-dev/berth/internal/version.Version=${VERSION} -X github.com/berth-dev/berth/internal/version.Commit=${COMMIT}" \
      -o /out/berth ./cmd/berth

# cgo needs a C toolchain for the target: this stage runs on the target's platform.
FROM golang:${GO_VERSION}-bookworm AS build-agent
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev COMMIT=unknown
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -trimpath \
      -ldflags "-s -w -X github.com/berth-dev/berth/internal/version.Version=${VERSION} -X github.com/berth-dev/berth/internal/version.Commit=${COMMIT}" \
      -o /out/berth ./cmd/berth

FROM gcr.io/distroless/base-debian12:nonroot AS berth-agent
COPY --from=build-agent /out/berth /berth
USER 65532:65532
ENTRYPOINT ["/berth"]
CMD ["agent"]

FROM gcr.io/distroless/static-debian12:nonroot AS berth
COPY --from=build /out/berth /berth
USER 65532:65532
ENTRYPOINT ["/berth"]
CMD ["--help"]
