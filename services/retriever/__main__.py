from services.retriever.service import SERVICE
from shared.worker import run_service

run_service(SERVICE)
