# iac-agui as a minimal container: a fully static binary in an otherwise empty image.
# docs/operations.md explains every line. Build: docker build -t iac-agui .

# Build stage: the static binary (static glibc, `make static`), and the two directories the
# server writes to, owned by the unprivileged user of the final image.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN make static \
 && mkdir -p /out/workspace /out/state \
 && cp target/x86_64-unknown-linux-gnu/release/iac-agui /out/iac-agui

FROM scratch
COPY --from=build /out/iac-agui /iac-agui
COPY --from=build --chown=10001:10001 /out/workspace /workspace
COPY --from=build --chown=10001:10001 /out/state /state
# Never root: a numeric user needs no /etc/passwd.
USER 10001:10001
# Workspaces live under /workspace, and only there (not the process cwd).
WORKDIR /workspace
ENV IAC_CODE_AGUI_HOST=0.0.0.0 \
    IAC_CODE_AGUI_PORT=8000 \
    IAC_CODE_AGUI_ALLOWED_CWDS=/workspace \
    IAC_CODE_AGUI_STATE_DIR=/state \
    HOME=/state
# Thread state survives the container.
VOLUME ["/state"]
EXPOSE 8000
# No shell in the image: the binary checks itself.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["/iac-agui", "healthcheck"]
ENTRYPOINT ["/iac-agui"]
# The kernel runs beside it (same pod / network namespace); `docker run iac-agui --demo` tries it out.
CMD ["--a2a-url", "http://127.0.0.1:9100/"]
