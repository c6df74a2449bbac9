// The status bar entry: "GPU: MIG 1g.10gb, 10 GiB, isolated · 4.2 of 5 GPU-h left", refreshed
// every minute from the server extension (GET <base_url>gpulab/me); a click opens the gpulab page.
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

const REFRESH_MS = 60000;

async function fetchMe(settings) {
  const url = URLExt.join(settings.baseUrl, 'gpulab', 'me');
  const response = await ServerConnection.makeRequest(url, {}, settings);
  let body = {};
  try {
    body = await response.json();
  } catch (e) {
    body = {};
  }
  if (!response.ok) {
    throw new Error(body.message || response.statusText);
  }
  return body;
}

const plugin = {
  id: 'jupyterlab-gpulab:status',
  description: 'The GPU slice this server holds and the GPU-hours left.',
  autoStart: true,
  optional: [IStatusBar],
  activate: (app, statusBar) => {
    if (!statusBar) {
      return;
    }
    const widget = new Widget();
    widget.addClass('jp-gpulab-status');
    widget.id = 'jupyterlab-gpulab-status';
    widget.node.textContent = 'GPU: …';
    let page = null;
    widget.node.addEventListener('click', () => {
      if (page) {
        window.open(page, '_blank', 'noopener');
      }
    });
    statusBar.registerStatusItem(plugin.id, { item: widget, align: 'left', rank: 1000 });
    const settings = ServerConnection.makeSettings();
    const refresh = async () => {
      try {
        const me = await fetchMe(settings);
        widget.node.textContent = me.text;
        widget.node.title = me.title;
        widget.node.dataset.level = me.level;
        page = me.page;
      } catch (e) {
        widget.node.textContent = 'GPU: unknown';
        widget.node.title = `gpulab: ${e.message}`;
      }
    };
    void refresh();
    window.setInterval(refresh, REFRESH_MS);
  }
};

export default plugin;
