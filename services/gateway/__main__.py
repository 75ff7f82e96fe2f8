import uvicorn

from services.gateway.app import create_app
from shared.config import get_settings
from shared.logs import setup_logging

settings = get_settings()
setup_logging("gateway", settings.log_level)
uvicorn.run(create_app(settings), host=settings.gateway_host, port=settings.gateway_port, log_config=None,
            proxy_headers=True, timeout_graceful_shutdown=10)
