# gpulab framework images: the Python environment on PATH in every shell.
# Debian's /etc/profile resets PATH for login shells (JupyterLab's terminal runs `bash -l`),
# dropping the image's ENV PATH: put /opt/venv/bin back in front, once.
case ":$PATH:" in
    *:/opt/venv/bin:*) ;;
    *) PATH="/opt/venv/bin:$PATH" ;;
esac
export PATH
