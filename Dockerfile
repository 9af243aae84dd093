# iac-agui as a minimal container: the release's static binary in an otherwise empty image.
# docs/operations.md explains every line. Build the release first, then the image:
#   make dist && docker build -t iac-agui .
# No Rust toolchain is involved: the image is made from dist/'s tarball, checked against
# dist/SHA256SUMS.

# Unpack stage: the verified binary, and the two directories the server writes to, owned by
# the unprivileged user of the final image.
FROM debian:bookworm-slim AS unpack
COPY dist/SHA256SUMS dist/iac-agui-*-x86_64-unknown-linux-gnu.tar.gz /dist/
RUN cd /dist \
 && sha256sum --check --ignore-missing --strict SHA256SUMS \
 && tar -xzf iac-agui-*-x86_64-unknown-linux-gnu.tar.gz --strip-components=1 \
 && mkdir -p /out/workspace /out/state \
 && cp /dist/iac-agui /out/iac-agui

FROM scratch
COPY --from=unpack /out/iac-agui /iac-agui
COPY --from=unpack --chown=10001:10001 /out/workspace /workspace
COPY --from=unpack --chown=10001:10001 /out/state /state
# Never root: a numeric user needs no /etc/passwd.
USER 10001:10001
# Workspaces live under /workspace, and only there (not the process cwd).
WORKDIR /workspace
ENV IAC_CODE_AGUI_HOST=0.0.0.0 \
    IAC_CODE_AGUI_PORT=8000 \
    IAC_CODE_AGUI_ALLOWED_CWDS=/workspace \
    IAC_CODE_AGUI_STATE_DIR=/state \
    IAC_CODE_AGUI_LOG_FORMAT=json \
    HOME=/state
# Thread state survives the container.
VOLUME ["/state"]
EXPOSE 8000
# No shell in the image: the binary checks itself.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["/iac-agui", "healthcheck"]
ENTRYPOINT ["/iac-agui"]
# The kernel runs beside it (same pod / network namespace); `docker run iac-agui --demo` tries it out.
CMD ["--a2a-url", "http://127.0.0.1:9100/"]
